//! Bundles: one payment of a plan of several channels grants every channel once; seats are
//! all or nothing (a race for the last seat of the seat-limited channel of a bundle never
//! oversells and never grants half a bundle); bundle payments racing single-channel payments
//! and sweeps of the same pairs never deadlock and extend every pair exactly as often as paid;
//! a late payment whose hold expired, a checkout and a pre-checkout are judged as a whole.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::{
    bot::conversation::{pre_checkout_update, send},
    support::{
        helpers::{NewPlan, TestApp, db_now, id, payment_event, reference},
        race::race,
        rows::{count, expire_hold},
    },
};

/// Inserts a plan over `channels` (in the plan's order: the first is its orders' channel) with
/// raw SQL; returns its id.
pub(crate) async fn insert_plan(
    app: &TestApp,
    kind: &str,
    price_minor: i64,
    currency: &str,
    period_days: Option<i32>,
    channels: &[i64],
) -> i64 {
    let plan = NewPlan {
        title: "Plan",
        kind,
        price_minor,
        currency,
        period_days,
        position: 0,
    };
    app.insert_plan(plan, channels).await
}

/// `POST /api/orders {"subscriber_id", "plan_id"}` → the order.
pub(crate) async fn order_plan(app: &TestApp, subscriber: i64, plan: i64) -> Value {
    app.post(
        "/api/orders",
        json!({"subscriber_id": subscriber, "plan_id": plan}),
    )
    .await
    .expect(201)
}

/// The membership of a pair: (status, expires_at), if any.
pub(crate) async fn membership_of(
    app: &TestApp,
    subscriber: i64,
    channel: i64,
) -> Option<(String, DateTime<Utc>)> {
    app.db()
        .await
        .query_opt(
            "SELECT status, expires_at FROM memberships WHERE subscriber_id = $1 AND channel_id = $2",
            &[&(subscriber as i32), &(channel as i32)],
        )
        .await
        .unwrap()
        .map(|r| (r.get("status"), r.get("expires_at")))
}

fn outcome(r: &Value) -> (Option<&str>, Option<&str>) {
    (
        r["payment"]["outcome"].as_str(),
        r["payment"]["reason"].as_str(),
    )
}

/// For each membership of `sub`: (channel, events of `payment`, grant/receipt effects of it,
/// their kinds).
async fn effects_of(app: &TestApp, sub: i64, payment: i64) -> Vec<(i64, i64, i64, Option<String>)> {
    let db = app.db().await;
    let rows = db
        .query(
            "SELECT m.channel_id,
                (SELECT count(*) FROM membership_events e
                  WHERE e.membership_id = m.id AND e.cause = 'payment' AND e.payment_id = $2)
                  AS events,
                (SELECT count(*) FROM effects f
                  WHERE f.membership_id = m.id AND f.kind IN ('grant', 'renewal_receipt')
                    AND f.payment_id = $2) AS effects,
                (SELECT string_agg(f.kind, ',') FROM effects f
                  WHERE f.membership_id = m.id AND f.payment_id = $2) AS kinds
             FROM memberships m WHERE m.subscriber_id = $1 ORDER BY m.channel_id",
            &[&(sub as i32), &payment],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            (
                r.get::<_, i32>("channel_id") as i64,
                r.get::<_, i64>("events"),
                r.get::<_, i64>("effects"),
                r.get::<_, Option<String>>("kinds"),
            )
        })
        .collect::<Vec<_>>()
}

#[tokio::test]
async fn a_bundle_payment_grants_every_channel_once() {
    let app = TestApp::spawn().await;
    let a = id(&app.create_channel(-51_001, json!({})).await);
    let b = id(&app.create_channel(-51_002, json!({})).await);
    let c = id(&app.create_channel(-51_003, json!({})).await);
    // The plan's first channel is not its lowest id.
    let plan = insert_plan(&app, "paid", 45_000, "UAH", Some(10), &[c, a, b]).await;
    let sub = id(&app.create_subscriber(51_001).await);
    // Already a member of `b`: that membership is extended (a receipt), the others granted.
    app.post(
        "/api/memberships",
        json!({"subscriber_id": sub, "channel_id": b, "days": 5}),
    )
    .await
    .expect(201);
    let (_, b_before) = membership_of(&app, sub, b).await.unwrap();

    let order = order_plan(&app, sub, plan).await;
    assert_eq!(order["channel_id"], c);
    assert_eq!(order["amount_minor"], 45_000);
    let before = db_now(&app).await;
    let r = app.pay_order(&order, "bundle-pay-1").await.expect(200);
    let after = db_now(&app).await;
    assert_eq!(outcome(&r), (Some("applied"), None), "{r}");
    assert_eq!(r["duplicate"], false);
    assert_eq!(
        r["membership"]["channel_id"], c,
        "the order's own channel: {r}"
    );
    let payment = r["payment"]["id"].as_i64().unwrap();

    for ch in [a, c] {
        let (status, expires) = membership_of(&app, sub, ch).await.expect("granted");
        assert_eq!(status, "active");
        assert!(
            before + Duration::days(10) <= expires && expires <= after + Duration::days(10),
            "channel {ch}: a new membership of the plan's 10 days, not the channel's 30: {expires}"
        );
    }
    let (_, b_after) = membership_of(&app, sub, b).await.unwrap();
    assert_eq!(
        b_after,
        b_before + Duration::days(10),
        "b extended from its own expiry"
    );

    let first = effects_of(&app, sub, payment).await;
    assert_eq!(
        first,
        vec![
            (a, 1, 1, Some("grant".to_string())),
            (b, 1, 1, Some("renewal_receipt".to_string())),
            (c, 1, 1, Some("grant".to_string())),
        ]
    );
    assert_eq!(app.count("payments").await, 1);
    let paid: String = app
        .db()
        .await
        .query_one("SELECT status FROM orders WHERE id = $1", &[&id(&order)])
        .await
        .unwrap()
        .get(0);
    assert_eq!(paid, "paid");

    // A redelivery changes nothing; a second payment of the paid order is kept, granting nothing.
    let again = app.pay_order(&order, "bundle-pay-1").await.expect(200);
    assert_eq!(again["duplicate"], true, "{again}");
    let second = app.pay_order(&order, "bundle-pay-2").await.expect(200);
    assert_eq!(
        outcome(&second),
        (Some("needs_review"), Some("already_paid"))
    );
    assert_eq!(effects_of(&app, sub, payment).await, first);
    assert_eq!(
        app.count("membership_events WHERE cause = 'payment'").await,
        3
    );
    let (_, b_last) = membership_of(&app, sub, b).await.unwrap();
    assert_eq!(b_last, b_after);
}

/// What one racer did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Got {
    Admitted,
    Refused,
}

#[tokio::test]
async fn a_bundle_and_single_buyers_racing_for_the_last_seat_never_oversell_or_split_a_bundle() {
    const ROUNDS: i64 = 12;
    const SINGLES: i64 = 3;
    const BUNDLES: i64 = 3;
    let app = Arc::new(TestApp::spawn().await);
    app.token().await;
    for round in 0..ROUNDS {
        let limited = id(&app
            .create_channel(-52_000 - round * 2, json!({"seat_limit": 2}))
            .await);
        let open = id(&app.create_channel(-52_001 - round * 2, json!({})).await);
        // One seat of two is taken already: the race is for the last one.
        let member = id(&app.create_subscriber(52_000_000 + round * 100).await);
        app.post(
            "/api/memberships",
            json!({"subscriber_id": member, "channel_id": limited, "days": 30}),
        )
        .await
        .expect(201);
        // Alternate which channel comes first in the plan.
        let channels = if round % 2 == 0 {
            [open, limited]
        } else {
            [limited, open]
        };
        let bundle = insert_plan(&app, "paid", 30_000, "UAH", Some(30), &channels).await;
        let mut racers = Vec::new();
        for n in 0..SINGLES + BUNDLES {
            let sub = id(&app
                .create_subscriber(52_000_000 + round * 100 + 1 + n)
                .await);
            let order = if n < SINGLES {
                app.create_order(sub, limited).await
            } else {
                order_plan(&app, sub, bundle).await
            };
            racers.push((n, sub, order));
        }
        let results = race(racers.len(), |i| {
            let (n, sub, order) = racers[i].clone();
            let app = app.clone();
            async move {
                // Odd racers check out first (a hold), then pay; even ones pay at once.
                if n % 2 == 1 {
                    let r = app.checkout(id(&order)).await;
                    match r.status.as_u16() {
                        200 => {}
                        409 => return (sub, n, Got::Refused),
                        s => panic!("round {round}: checkout {s}"),
                    }
                }
                let pay = format!("race-{round}-{n}");
                let r = app.pay_order(&order, &pay).await.expect(200);
                match outcome(&r) {
                    (Some("applied"), None) => (sub, n, Got::Admitted),
                    (_, Some("no_seat")) => (sub, n, Got::Refused),
                    other => panic!("round {round}: unexpected payment {other:?}: {r}"),
                }
            }
        })
        .await;
        let mut admitted = 0;
        for (sub, n, got) in results {
            let in_limited = membership_of(&app, sub, limited).await.is_some();
            let in_open = membership_of(&app, sub, open).await.is_some();
            assert_eq!(in_limited, got == Got::Admitted, "round {round} racer {n}");
            if n >= SINGLES {
                assert_eq!(
                    in_open, in_limited,
                    "round {round}: half a bundle for racer {n}"
                );
            } else {
                assert!(!in_open, "round {round}");
            }
            if got == Got::Admitted {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 1, "round {round}: exactly the last seat was sold");
        assert_eq!(
            app.count(&format!(
                "memberships WHERE channel_id = {limited} AND status = 'active'"
            ))
            .await,
            2,
            "round {round}"
        );
    }
}

async fn deadlocks(app: &TestApp) -> i64 {
    let db = app.db().await;
    db.batch_execute("SELECT pg_stat_clear_snapshot()")
        .await
        .unwrap();
    db.query_one(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
        &[],
    )
    .await
    .unwrap()
    .get("deadlocks")
}

#[tokio::test]
async fn bundle_payments_racing_single_payments_and_sweeps_extend_every_pair_exactly() {
    const ROUNDS: i64 = 8;
    const EACH: i64 = 2;
    let app = Arc::new(TestApp::spawn().await);
    app.token().await;
    let a = id(&app
        .create_channel(-53_001, json!({"billing_period_days": 3}))
        .await);
    let b = id(&app
        .create_channel(-53_002, json!({"billing_period_days": 3}))
        .await);
    // Two bundles of the same channels, in opposite plan orders: locks taken in plan order
    // would deadlock them.
    let ab = insert_plan(&app, "paid", 500, "UAH", Some(3), &[a, b]).await;
    let ba = insert_plan(&app, "paid", 500, "UAH", Some(3), &[b, a]).await;
    let deadlocks_before = deadlocks(&app).await;
    for round in 0..ROUNDS {
        let sub = id(&app.create_subscriber(53_000_000 + round).await);
        // Both memberships are due for the sweep when the race starts.
        for ch in [a, b] {
            app.post(
                "/api/memberships",
                json!({"subscriber_id": sub, "channel_id": ch, "days": 1}),
            )
            .await
            .expect(201);
        }
        app.db()
            .await
            .execute(
                "UPDATE memberships SET expires_at = statement_timestamp() - interval '1 second'
                 WHERE subscriber_id = $1",
                &[&(sub as i32)],
            )
            .await
            .unwrap();
        let mut orders = Vec::new();
        for _ in 0..EACH {
            orders.push(order_plan(&app, sub, ab).await);
            orders.push(order_plan(&app, sub, ba).await);
            orders.push(app.create_order(sub, a).await);
            orders.push(app.create_order(sub, b).await);
        }
        let extensions_a = EACH * 3;
        let extensions_b = EACH * 3;
        let sweeps = 3;
        let t0 = db_now(&app).await;
        // The payments, then the sweeps, all released together.
        race(orders.len() + sweeps, |n| {
            let (app, order) = (app.clone(), orders.get(n).cloned());
            async move {
                match order {
                    Some(order) => {
                        let r = app
                            .pay_order(&order, &format!("mix-{round}-{n}"))
                            .await
                            .expect(200);
                        assert_eq!(outcome(&r), (Some("applied"), None), "round {round}: {r}");
                    }
                    None => {
                        app.post("/api/sweep", Value::Null).await.expect(200);
                    }
                }
            }
        })
        .await;
        let t1 = db_now(&app).await;
        for (ch, n) in [(a, extensions_a), (b, extensions_b)] {
            let (status, expires) = membership_of(&app, sub, ch).await.unwrap();
            assert_eq!(status, "active", "round {round}");
            // The first extension starts from now (the old term is over), every later one
            // from the previous expiry, whatever the sweep did in between.
            assert!(
                t0 + Duration::days(3 * n) <= expires && expires <= t1 + Duration::days(3 * n),
                "round {round}: channel {ch} expires {expires}, expected {n} terms of 3 days \
                 from {t0}..{t1}"
            );
            let events: i64 = count(
                &app,
                "membership_events e JOIN memberships m
                       ON m.id = e.membership_id
                     WHERE m.subscriber_id = $1 AND m.channel_id = $2 AND e.cause = 'payment'",
                &[&(sub as i32), &(ch as i32)],
            )
            .await;
            assert_eq!(events, n, "round {round}: channel {ch}");
        }
    }
    // Statistics reach pg_stat_database shortly after the transactions end.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(
        deadlocks(&app).await,
        deadlocks_before,
        "a deadlock was detected (and retried)"
    );
}

#[tokio::test]
async fn a_late_bundle_payment_whose_hold_expired_grants_nothing() {
    let app = TestApp::spawn().await;
    let open = id(&app.create_channel(-54_001, json!({})).await);
    let limited = id(&app.create_channel(-54_002, json!({"seat_limit": 5})).await);
    let plan = insert_plan(&app, "paid", 30_000, "UAH", Some(30), &[open, limited]).await;
    let sub = id(&app.create_subscriber(54_001).await);
    let order = order_plan(&app, sub, plan).await;
    let held = app.checkout(id(&order)).await.expect(200);
    assert!(held["order"]["hold_until"].is_string(), "{held}");
    // The hold counts in the seat-limited channel, though the order's own channel is the open one.
    let overview = app.get("/api/overview").await.expect(200);
    let seats = overview["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == limited)
        .map(|c| c["seats_taken"].clone());
    assert_eq!(seats, Some(json!(1)), "{overview}");
    expire_hold(&app, id(&order), 1).await;
    let r = app.pay_order(&order, "late-bundle").await.expect(200);
    assert_eq!(
        outcome(&r),
        (Some("needs_review"), Some("hold_expired")),
        "{r}"
    );
    assert!(membership_of(&app, sub, open).await.is_none());
    assert!(membership_of(&app, sub, limited).await.is_none());
    assert_eq!(app.count("membership_events").await, 0);
}

#[tokio::test]
async fn a_bundle_with_one_full_channel_is_refused_whole_at_checkout_pre_checkout_and_payment() {
    let app = TestApp::spawn().await;
    let stars = json!({"currency": "XTR", "price_minor": 100});
    let open = id(&app.create_channel(-55_001, stars.clone()).await);
    let mut full = stars.clone();
    full["seat_limit"] = json!(1);
    let full = id(&app.create_channel(-55_002, full).await);
    let member = id(&app.create_subscriber(55_000).await);
    app.post(
        "/api/memberships",
        json!({"subscriber_id": member, "channel_id": full, "days": 30}),
    )
    .await
    .expect(201);
    let plan = insert_plan(&app, "paid", 150, "XTR", Some(30), &[open, full]).await;

    // Checkout.
    let sub = id(&app.create_subscriber(55_001).await);
    let order = order_plan(&app, sub, plan).await;
    let r = app.checkout(id(&order)).await.expect(409);
    assert!(r["detail"].as_str().unwrap().contains("full"), "{r}");
    let again = app
        .get(&format!("/api/orders/{}", id(&order)))
        .await
        .expect(200);
    assert_eq!(again["hold_until"], Value::Null);

    // Pre-checkout.
    let answer = send(
        &app,
        &pre_checkout_update("bundle-q-1", 55_001, &reference(&order), 150),
    )
    .await;
    assert_eq!(answer["ok"], false, "{answer}");
    let stored: String = app
        .db()
        .await
        .query_one(
            "SELECT reason FROM pre_checkout_decisions WHERE query_id = 'bundle-q-1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, "no_seat");

    // A payment anyway: refused whole, refunded, nothing granted.
    let r = app
        .post_signed_webhook(&payment_event(
            "bundle-full",
            &reference(&order),
            150,
            "XTR",
        ))
        .await
        .expect(200);
    assert_eq!(outcome(&r).1, Some("no_seat"), "{r}");
    assert!(membership_of(&app, sub, open).await.is_none());
    assert!(membership_of(&app, sub, full).await.is_none());
}

#[tokio::test]
async fn a_recurring_stars_bundle_renews_every_channel_and_holds_its_seats() {
    use crate::bot::conversation::payment_update;
    let app = TestApp::spawn().await;
    let open = id(&app
        .create_channel(-56_001, json!({"currency": "XTR", "price_minor": 200}))
        .await);
    let limited = id(&app
        .create_channel(
            -56_002,
            json!({"currency": "XTR", "price_minor": 200, "seat_limit": 1}),
        )
        .await);
    // The seat-limited channel is the bundle's second: its orders' channel_id is the other one.
    let plan = insert_plan(&app, "paid", 300, "XTR", Some(30), &[open, limited]).await;
    app.db()
        .await
        .execute("UPDATE plans SET recurring = true WHERE id = $1", &[&plan])
        .await
        .unwrap();
    let sub = id(&app.create_subscriber(56_001).await);
    let order = order_plan(&app, sub, plan).await;
    let reference = reference(&order);
    let pre = send(
        &app,
        &pre_checkout_update("rb-q-1", 56_001, &reference, 300),
    )
    .await;
    assert_eq!(pre["ok"], true, "{pre}");
    let secs = |t: DateTime<Utc>| DateTime::from_timestamp(t.timestamp(), 0).unwrap();
    let renews_at = secs(Utc::now() + Duration::days(30));
    send(
        &app,
        &payment_update("rb-1", 56_001, &reference, 300, Some((true, renews_at))),
    )
    .await;
    for ch in [open, limited] {
        assert_eq!(
            membership_of(&app, sub, ch).await,
            Some(("active".into(), renews_at + Duration::days(1))),
            "channel {ch}"
        );
    }
    // The terms ran out a minute ago and the renewal was due ten seconds ago: the live
    // subscription still holds its seat in the seat-limited channel of its plan.
    let db = app.db().await;
    db.execute(
        "UPDATE memberships SET expires_at = statement_timestamp() - interval '1 minute'
         WHERE subscriber_id = $1",
        &[&(sub as i32)],
    )
    .await
    .unwrap();
    db.execute(
        "UPDATE star_subscriptions SET expires_at = statement_timestamp() - interval '10 seconds'",
        &[],
    )
    .await
    .unwrap();
    let other = id(&app.create_subscriber(56_002).await);
    let other_order = app.create_order(other, limited).await;
    let refused = send(
        &app,
        &pre_checkout_update(
            "rb-q-2",
            56_002,
            &crate::support::helpers::reference(&other_order),
            200,
        ),
    )
    .await;
    assert_eq!(refused["ok"], false, "{refused}");

    // The renewal extends every channel of the plan.
    let next = secs(Utc::now() + Duration::days(30));
    send(
        &app,
        &payment_update("rb-2", 56_001, &reference, 300, Some((false, next))),
    )
    .await;
    let (outcome, reason): (String, Option<String>) = {
        let r = db
            .query_one(
                "SELECT outcome, reason FROM payments WHERE external_id = 'rb-2'",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((outcome.as_str(), reason), ("applied", None));
    for ch in [open, limited] {
        assert_eq!(
            membership_of(&app, sub, ch).await,
            Some(("active".into(), next + Duration::days(1))),
            "channel {ch}"
        );
        assert_eq!(
            app.count(&format!(
                "membership_events e JOIN memberships m ON m.id = e.membership_id
                 WHERE m.subscriber_id = {sub} AND m.channel_id = {ch} AND e.cause = 'payment'"
            ))
            .await,
            2
        );
    }
}
