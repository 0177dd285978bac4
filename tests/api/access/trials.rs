//! Trials and free orders: `POST /api/orders/{id}/claim` grants through the payment's locked
//! path, once per buyer and channel ever — ten presses of one order, ten orders of one trial
//! plan claimed at once, two buyers racing for the last seat, a former member — and a free
//! order of a paid plan (a 100 % code) with cause `promo`.

use std::sync::Arc;

use chrono::Duration;
use serde_json::{Value, json};

use crate::{
    catalog::bundles::{insert_plan, membership_of, order_plan},
    support::{
        helpers::{TestApp, TestResponse, db_now, id},
        race::race,
    },
};

/// The 409 detail of a used trial.
const TRIAL_USED: &str =
    "the subscriber already had a trial of, or was a member of, a channel of this plan";

async fn claim(app: &TestApp, order: i64) -> TestResponse {
    app.post(&format!("/api/orders/{order}/claim"), Value::Null)
        .await
}

/// Claims each order at once (released together); the statuses, in order.
async fn claim_all(app: &Arc<TestApp>, orders: &[i64]) -> Vec<(u16, Value)> {
    race(orders.len(), |i| {
        let (app, order) = (app.clone(), orders[i]);
        async move {
            let r = claim(&app, order).await;
            let status = r.status.as_u16();
            (
                status,
                if r.bytes.is_empty() {
                    Value::Null
                } else {
                    r.json()
                },
            )
        }
    })
    .await
}

#[tokio::test]
async fn a_trial_claim_grants_the_plan_period_once_with_cause_trial() {
    let app = TestApp::spawn().await;
    let a = id(&app.create_channel(-61_001, json!({})).await);
    let b = id(&app.create_channel(-61_002, json!({"seat_limit": 3})).await);
    let plan = insert_plan(&app, "trial", 0, "UAH", Some(7), &[b, a]).await;
    let sub = id(&app.create_subscriber(61_001).await);
    let order = order_plan(&app, sub, plan).await;
    assert_eq!(
        order["status"], "pending",
        "a trial's order waits for its claim"
    );
    assert_eq!(order["amount_minor"], 0);
    let before = db_now(&app).await;
    let r = claim(&app, id(&order)).await.expect(200);
    let after = db_now(&app).await;
    assert_eq!(r["order"]["status"], "paid", "{r}");
    assert!(r["order"]["paid_at"].is_string());
    let memberships = r["memberships"].as_array().unwrap();
    assert_eq!(
        memberships
            .iter()
            .map(|m| m["channel_id"].clone())
            .collect::<Vec<_>>(),
        vec![json!(a.min(b)), json!(a.max(b))],
        "{r}"
    );
    for ch in [a, b] {
        let (status, expires) = membership_of(&app, sub, ch).await.unwrap();
        assert_eq!(status, "active");
        assert!(before + Duration::days(7) <= expires && expires <= after + Duration::days(7));
    }
    assert_eq!(
        app.count("membership_events WHERE cause = 'trial'").await,
        2
    );
    assert_eq!(app.count("effects WHERE kind = 'grant'").await, 2);
    assert_eq!(
        app.count(&format!("trial_uses WHERE order_id = {}", id(&order)))
            .await,
        2
    );
    assert_eq!(
        app.count("payments").await,
        0,
        "no payment row for a free grant"
    );

    // Claimed already; unknown order; an order that is not free.
    let again = claim(&app, id(&order)).await.expect(409);
    assert!(
        again["detail"].as_str().unwrap().contains("not pending"),
        "{again}"
    );
    claim(&app, 999_999).await.expect(404);
    let paid_order = app.create_order(sub, a).await;
    let r = claim(&app, id(&paid_order)).await.expect(409);
    assert!(r["detail"].as_str().unwrap().contains("not free"), "{r}");
    assert_eq!(app.count("membership_events").await, 2);
}

#[tokio::test]
async fn a_trial_pressed_ten_times_at_once_grants_once() {
    const ROUNDS: i64 = 6;
    const PRESSES: usize = 10;
    let app = Arc::new(TestApp::spawn().await);
    app.token().await;
    // A seat-limited channel (whose row lock also serializes claims) and an unlimited one
    // (where only the pair lock does).
    let limited = id(&app.create_channel(-62_001, json!({"seat_limit": 50})).await);
    let open = id(&app.create_channel(-62_002, json!({})).await);
    let plans = [
        insert_plan(&app, "trial", 0, "UAH", Some(3), &[limited]).await,
        insert_plan(&app, "trial", 0, "UAH", Some(3), &[open]).await,
    ];
    for round in 0..ROUNDS {
        let plan = plans[round as usize % 2];
        // Ten claims of one order.
        let sub = id(&app.create_subscriber(62_000_000 + round * 2).await);
        let order = id(&order_plan(&app, sub, plan).await);
        let answers = claim_all(&app, &[order; PRESSES]).await;
        let ok = answers.iter().filter(|(s, _)| *s == 200).count();
        assert_eq!(ok, 1, "round {round}: {answers:?}");
        assert!(
            answers.iter().all(|(s, _)| *s == 200 || *s == 409),
            "{answers:?}"
        );

        // Ten orders of the same buyer and plan, claimed at once.
        let sub2 = id(&app.create_subscriber(62_000_001 + round * 2).await);
        let mut orders = Vec::new();
        for _ in 0..PRESSES {
            orders.push(id(&order_plan(&app, sub2, plan).await));
        }
        let answers = claim_all(&app, &orders).await;
        let ok = answers.iter().filter(|(s, _)| *s == 200).count();
        assert_eq!(ok, 1, "round {round}: {answers:?}");
        for (s, body) in &answers {
            if *s == 409 {
                assert!(body["detail"] == json!(TRIAL_USED), "round {round}: {body}");
            } else {
                assert_eq!(*s, 200, "{body}");
            }
        }
        for s in [sub, sub2] {
            assert_eq!(
                app.count(&format!(
                    "membership_events e JOIN memberships m ON m.id = e.membership_id
                     WHERE m.subscriber_id = {s} AND e.cause = 'trial'"
                ))
                .await,
                1,
                "round {round}"
            );
            assert_eq!(
                app.count(&format!("trial_uses WHERE subscriber_id = {s}"))
                    .await,
                1
            );
            assert_eq!(
                app.count(&format!(
                    "orders WHERE subscriber_id = {s} AND status = 'paid'"
                ))
                .await,
                1
            );
        }
    }
}

#[tokio::test]
async fn two_buyers_racing_a_trial_for_the_last_seat_get_one_seat() {
    const ROUNDS: i64 = 10;
    let app = Arc::new(TestApp::spawn().await);
    app.token().await;
    for round in 0..ROUNDS {
        let chan = id(&app
            .create_channel(-63_000 - round, json!({"seat_limit": 1}))
            .await);
        let open = id(&app.create_channel(-63_500 - round, json!({})).await);
        // Alternate a trial of the channel alone and a trial bundle with an open channel.
        let channels = if round % 2 == 0 {
            vec![chan]
        } else {
            vec![open, chan]
        };
        let plan = insert_plan(&app, "trial", 0, "UAH", Some(5), &channels).await;
        let mut orders = Vec::new();
        let mut subs = Vec::new();
        for n in 0..2 {
            let sub = id(&app.create_subscriber(63_000_000 + round * 10 + n).await);
            subs.push(sub);
            orders.push(id(&order_plan(&app, sub, plan).await));
        }
        let answers = claim_all(&app, &orders).await;
        let ok = answers.iter().filter(|(s, _)| *s == 200).count();
        assert_eq!(ok, 1, "round {round}: {answers:?}");
        let refused = answers
            .iter()
            .find(|(s, _)| *s == 409)
            .expect("one refusal");
        assert!(
            refused.1["detail"].as_str().unwrap().contains("full"),
            "{refused:?}"
        );
        assert_eq!(
            app.count(&format!("memberships WHERE channel_id = {chan}"))
                .await,
            1,
            "round {round}"
        );
        for sub in subs {
            assert_eq!(
                membership_of(&app, sub, open).await.is_some(),
                round % 2 == 1 && membership_of(&app, sub, chan).await.is_some(),
                "round {round}: never half a bundle"
            );
        }
    }
}

#[tokio::test]
async fn a_former_member_is_refused_a_trial_and_nothing_is_written() {
    let app = TestApp::spawn().await;
    let a = id(&app.create_channel(-64_001, json!({})).await);
    let b = id(&app.create_channel(-64_002, json!({})).await);
    let trial_b = insert_plan(&app, "trial", 0, "UAH", Some(7), &[b]).await;
    let trial_ab = insert_plan(&app, "trial", 0, "UAH", Some(7), &[a, b]).await;

    // A member of `b` (an ended membership counts: "ever").
    let member = id(&app.create_subscriber(64_001).await);
    app.post(
        "/api/memberships",
        json!({"subscriber_id": member, "channel_id": b, "days": 1}),
    )
    .await
    .expect(201);
    app.db()
        .await
        .execute(
            "UPDATE memberships SET status = 'expired', expires_at = statement_timestamp() - interval '9 days'",
            &[],
        )
        .await
        .unwrap();
    for plan in [trial_b, trial_ab] {
        let order = id(&order_plan(&app, member, plan).await);
        let r = claim(&app, order).await.expect(409);
        assert!(r["detail"].as_str().unwrap().contains("member"), "{r}");
        let o = app.get(&format!("/api/orders/{order}")).await.expect(200);
        assert_eq!(o["status"], "pending");
    }
    assert!(
        membership_of(&app, member, a).await.is_none(),
        "no half of a bundle"
    );

    // A buyer whose paid order bought `b` (whatever became of its membership since).
    let buyer = id(&app.create_subscriber(64_002).await);
    let order = app.create_order(buyer, b).await;
    app.pay_order(&order, "trial-former").await.expect(200);
    app.db()
        .await
        .execute(
            "DELETE FROM memberships WHERE subscriber_id = $1",
            &[&(buyer as i32)],
        )
        .await
        .unwrap();
    let t = id(&order_plan(&app, buyer, trial_b).await);
    claim(&app, t).await.expect(409);

    // A trial user of `b` cannot take the bundle's trial either.
    let tried = id(&app.create_subscriber(64_003).await);
    let t = id(&order_plan(&app, tried, trial_b).await);
    claim(&app, t).await.expect(200);
    let t = id(&order_plan(&app, tried, trial_ab).await);
    claim(&app, t).await.expect(409);
    assert!(membership_of(&app, tried, a).await.is_none());

    assert_eq!(app.count("trial_uses").await, 1);
    assert_eq!(
        app.count("membership_events WHERE cause = 'trial'").await,
        1
    );
}

#[tokio::test]
async fn a_free_order_of_a_paid_plan_is_claimed_with_cause_promo() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-65_001, json!({})).await);
    let plan = insert_plan(&app, "paid", 9_900, "UAH", Some(14), &[chan]).await;
    let sub = id(&app.create_subscriber(65_001).await);
    let db = app.db().await;
    let code: i64 = db
        .query_one(
            "INSERT INTO promo_codes (code, percent_off) VALUES ('FREE100', 100) RETURNING id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // The order a 100 % code makes (written here as the order's module writes it).
    let order: i64 = db
        .query_one(
            "INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency,
                                 plan_id, list_price_minor, discount_minor, promo_code_id,
                                 promo_held_until)
             VALUES ('ord_free_1', $1, $2, 0, 'UAH', $3, 9900, 9900, $4,
                     statement_timestamp() + interval '5 minutes')
             RETURNING id",
            &[&(sub as i32), &(chan as i32), &plan, &code],
        )
        .await
        .unwrap()
        .get(0);
    let r = claim(&app, order).await.expect(200);
    assert_eq!(r["order"]["status"], "paid");
    assert_eq!(r["order"]["promo_code"], "FREE100");
    assert_eq!(
        app.count("membership_events WHERE cause = 'promo'").await,
        1
    );
    assert_eq!(app.count("trial_uses").await, 0, "not a trial");
    let held: Option<chrono::DateTime<chrono::Utc>> = db
        .query_one(
            "SELECT promo_held_until FROM orders WHERE id = $1",
            &[&order],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, None, "a paid order holds no use any more: it is one");
    let (_, expires) = membership_of(&app, sub, chan).await.unwrap();
    assert!(expires > db_now(&app).await + Duration::days(13));
}

#[tokio::test]
async fn a_claim_honours_the_idempotency_key() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-66_001, json!({})).await);
    let plan = insert_plan(&app, "trial", 0, "UAH", Some(7), &[chan]).await;
    let sub = id(&app.create_subscriber(66_001).await);
    let order = id(&order_plan(&app, sub, plan).await);
    let path = format!("/api/orders/{order}/claim");
    let first = app
        .staff_with(
            axum::http::Method::POST,
            &path,
            Value::Null,
            &[("idempotency-key", "claim-1")],
        )
        .await
        .expect(200);
    let replay = app
        .staff_with(
            axum::http::Method::POST,
            &path,
            Value::Null,
            &[("idempotency-key", "claim-1")],
        )
        .await
        .expect(200);
    assert_eq!(first, replay);
    assert_eq!(app.count("membership_events").await, 1);
}
