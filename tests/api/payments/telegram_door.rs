//! Door 3, the Telegram bot webhook: Stars pre-checkout (stored decisions, seat holds), Stars
//! payments through the core, join requests, and the door's authentication.
//!
//! Each row of the door's decision table is one test here; the concurrent rows release their tasks
//! together with a barrier and repeat for [`ROUNDS`] rounds, then read the rows back. Holds
//! are expired by back-dating `orders.hold_until` with SQL, never by sleeping.

use std::sync::{
    Arc,
    atomic::{AtomicI64, Ordering},
};

use axum::http::Method;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::support::helpers::{TELEGRAM_SECRET, TestApp, TestResponse};

const ROUNDS: usize = 20;
/// The price of every Stars channel here, in stars.
const PRICE: i64 = 250;
const BUSY: &str = "Please try again in a moment.";
const SEAT_TAKEN: &str =
    "This seat has just been taken. Please choose another channel or try later.";
const EXPIRED: &str = "This invoice has expired. Please start a new order.";

static UPDATE_ID: AtomicI64 = AtomicI64::new(1);

fn next_update_id() -> i64 {
    UPDATE_ID.fetch_add(1, Ordering::Relaxed)
}

// ---- updates as Telegram sends them ----

pub(crate) fn pre_checkout_update(
    query_id: &str,
    from: i64,
    payload: &str,
    currency: &str,
    amount: i64,
) -> Value {
    json!({
        "update_id": next_update_id(),
        "pre_checkout_query": {
            "id": query_id,
            "from": {"id": from, "is_bot": false, "first_name": "Buyer", "language_code": "en"},
            "currency": currency,
            "total_amount": amount,
            "invoice_payload": payload
        }
    })
}

pub(crate) fn payment_update(
    charge_id: &str,
    from: i64,
    payload: &str,
    currency: &str,
    amount: i64,
) -> Value {
    json!({
        "update_id": next_update_id(),
        "message": {
            "message_id": next_update_id(),
            "date": Utc::now().timestamp(),
            "chat": {"id": from, "type": "private", "first_name": "Buyer"},
            "from": {"id": from, "is_bot": false, "first_name": "Buyer"},
            "successful_payment": {
                "currency": currency,
                "total_amount": amount,
                "invoice_payload": payload,
                "telegram_payment_charge_id": charge_id,
                "provider_payment_charge_id": ""
            }
        }
    })
}

fn join_request_update(chat_id: i64, from: i64) -> Value {
    json!({
        "update_id": next_update_id(),
        "chat_join_request": {
            "chat": {"id": chat_id, "type": "channel", "title": "Private"},
            "from": {"id": from, "is_bot": false, "first_name": "Joiner"},
            "user_chat_id": from,
            "date": Utc::now().timestamp()
        }
    })
}

// ---- set-up and row checks ----

/// An active Stars channel (`XTR`, [`PRICE`] stars for 30 days), optionally seat-limited.
async fn stars_channel(app: &TestApp, chat_id: i64, seat_limit: Option<i64>) -> i64 {
    let mut extra = json!({"currency": "XTR", "price_minor": PRICE});
    if let Some(limit) = seat_limit {
        extra["seat_limit"] = json!(limit);
    }
    let c = app.create_channel(chat_id, extra).await;
    c["id"].as_i64().unwrap()
}

async fn subscriber(app: &TestApp, telegram_user_id: i64) -> i64 {
    app.create_subscriber(telegram_user_id).await["id"]
        .as_i64()
        .unwrap()
}

/// Creates an order; returns `(id, reference)`.
async fn order(app: &TestApp, subscriber_id: i64, channel_id: i64) -> (i64, String) {
    let o = app
        .post(
            "/api/orders",
            json!({"subscriber_id": subscriber_id, "channel_id": channel_id}),
        )
        .await
        .expect(201);
    (
        o["id"].as_i64().unwrap(),
        o["reference"].as_str().unwrap().to_string(),
    )
}

/// Sends a pre-checkout for `payload` in Stars at [`PRICE`]; returns the answer body after
/// checking it is a well-formed `answerPreCheckoutQuery` for this query.
async fn pre_checkout(app: &TestApp, query_id: &str, from: i64, payload: &str) -> Value {
    let r = app
        .post_telegram_update(pre_checkout_update(query_id, from, payload, "XTR", PRICE))
        .await;
    answer_of(&r, query_id)
}

#[track_caller]
fn answer_of(r: &TestResponse, query_id: &str) -> Value {
    let body = r.expect(200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(body["method"], "answerPreCheckoutQuery");
    assert_eq!(body["pre_checkout_query_id"], query_id);
    if body["ok"] == true {
        assert!(body.get("error_message").is_none(), "{body}");
    } else {
        assert_eq!(body["ok"], false, "{body}");
        assert!(
            body["error_message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    body
}

async fn pay(app: &TestApp, charge_id: &str, from: i64, payload: &str) {
    let r = app
        .post_telegram_update(payment_update(charge_id, from, payload, "XTR", PRICE))
        .await;
    assert_eq!(r.expect(200), json!({}));
}

async fn hold_until(app: &TestApp, order_id: i64) -> Option<DateTime<Utc>> {
    app.db()
        .await
        .query_one("SELECT hold_until FROM orders WHERE id = $1", &[&order_id])
        .await
        .unwrap()
        .get(0)
}

/// Moves an order's hold one second into the past (the same as waiting `HOLD_SECS`).
async fn expire_hold(app: &TestApp, order_id: i64) {
    let n = app
        .db()
        .await
        .execute(
            "UPDATE orders SET hold_until = statement_timestamp() - interval '1 second'
             WHERE id = $1 AND hold_until IS NOT NULL",
            &[&order_id],
        )
        .await
        .unwrap();
    assert_eq!(n, 1, "order {order_id} had no hold to expire");
}

/// `(ok, reason, hold_until)` of the stored decision of a query.
async fn decision(app: &TestApp, query_id: &str) -> (bool, Option<String>, Option<DateTime<Utc>>) {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT ok, reason, hold_until FROM pre_checkout_decisions WHERE query_id = $1",
            &[&query_id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

async fn count(
    app: &TestApp,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> i64 {
    app.db().await.query_one(sql, params).await.unwrap().get(0)
}

/// `(outcome, reason)` of the Stars payment with this charge id.
async fn payment(app: &TestApp, charge_id: &str) -> (String, Option<String>) {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT outcome, reason FROM payments
             WHERE gateway = 'telegram_stars' AND external_id = $1",
            &[&charge_id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

async fn membership(
    app: &TestApp,
    subscriber_id: i64,
    channel_id: i64,
) -> Option<(i64, String, DateTime<Utc>)> {
    app.db()
        .await
        .query_opt(
            "SELECT id, status, expires_at FROM memberships
             WHERE subscriber_id = $1 AND channel_id = $2",
            &[&(subscriber_id as i32), &(channel_id as i32)],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
}

async fn order_status(app: &TestApp, order_id: i64) -> String {
    app.db()
        .await
        .query_one("SELECT status FROM orders WHERE id = $1", &[&order_id])
        .await
        .unwrap()
        .get(0)
}

// ---- the decision table ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_orders_racing_for_the_last_seat_one_holds_it() {
    let app = Arc::new(TestApp::spawn().await);
    for round in 0..ROUNDS as i64 {
        let channel = stars_channel(&app, -1_000_000 - round, Some(1)).await;
        let buyers = [1_000 + 2 * round, 1_001 + 2 * round];
        let mut orders = Vec::new();
        for b in buyers {
            let s = subscriber(&app, b).await;
            orders.push((b, order(&app, s, channel).await));
        }
        let barrier = Arc::new(Barrier::new(orders.len()));
        let tasks: Vec<_> = orders
            .iter()
            .map(|(buyer, (_, reference))| {
                let (app, barrier) = (app.clone(), barrier.clone());
                let (buyer, reference) = (*buyer, reference.clone());
                let query_id = format!("race-{round}-{buyer}");
                tokio::spawn(async move {
                    barrier.wait().await;
                    let body = pre_checkout(&app, &query_id, buyer, &reference).await;
                    (query_id, body)
                })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        let approved: Vec<_> = answers.iter().filter(|(_, b)| b["ok"] == true).collect();
        let refused: Vec<_> = answers.iter().filter(|(_, b)| b["ok"] == false).collect();
        assert_eq!(
            (approved.len(), refused.len()),
            (1, 1),
            "round {round}: {answers:?}"
        );
        assert_eq!(refused[0].1["error_message"], SEAT_TAKEN);
        assert_eq!(
            decision(&app, &refused[0].0).await.1.as_deref(),
            Some("no_seat")
        );
        let held = count(
            &app,
            "SELECT count(*) FROM orders WHERE channel_id = $1 AND hold_until IS NOT NULL",
            &[&(channel as i32)],
        )
        .await;
        assert_eq!(held, 1, "round {round}: exactly one order holds the seat");
        let (ok, reason, decided_hold) = decision(&app, &approved[0].0).await;
        assert!(ok && reason.is_none() && decided_hold.is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_update_delivered_twice_neither_holds_again_nor_extends_the_hold() {
    let app = Arc::new(TestApp::spawn().await);
    // One after the other.
    let channel = stars_channel(&app, -2001, Some(1)).await;
    let s = subscriber(&app, 501).await;
    let (order_id, reference) = order(&app, s, channel).await;
    let update = pre_checkout_update("dup-1", 501, &reference, "XTR", PRICE);
    let first = answer_of(&app.post_telegram_update(update.clone()).await, "dup-1");
    assert_eq!(first["ok"], true);
    let held = hold_until(&app, order_id)
        .await
        .expect("approved order holds the seat");
    let again = answer_of(&app.post_telegram_update(update).await, "dup-1");
    assert_eq!(again, first);
    assert_eq!(
        hold_until(&app, order_id).await,
        Some(held),
        "hold not extended"
    );
    let decisions = count(&app, "SELECT count(*) FROM pre_checkout_decisions", &[]).await;
    assert_eq!(decisions, 1);

    // At the same moment, many rounds: five copies of one query each round.
    for round in 0..ROUNDS as i64 {
        let channel = stars_channel(&app, -2100 - round, Some(1)).await;
        let buyer = 600 + round;
        let s = subscriber(&app, buyer).await;
        let (order_id, reference) = order(&app, s, channel).await;
        let query_id = format!("dup-round-{round}");
        let update = pre_checkout_update(&query_id, buyer, &reference, "XTR", PRICE);
        let barrier = Arc::new(Barrier::new(5));
        let tasks: Vec<_> = (0..5)
            .map(|_| {
                let (app, barrier, update) = (app.clone(), barrier.clone(), update.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    app.post_telegram_update(update).await
                })
            })
            .collect();
        for t in tasks {
            let body = answer_of(&t.await.unwrap(), &query_id);
            assert_eq!(body["ok"], true, "round {round}: {body}");
        }
        let held = hold_until(&app, order_id).await.expect("held");
        let (ok, _, decided_hold) = decision(&app, &query_id).await;
        assert!(ok);
        assert_eq!(
            decided_hold,
            Some(held),
            "round {round}: the hold was set once"
        );
        let n = count(
            &app,
            "SELECT count(*) FROM pre_checkout_decisions WHERE query_id = $1",
            &[&query_id],
        )
        .await;
        assert_eq!(n, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_successful_payment_delivered_twice_is_one_payment_and_one_extension() {
    let app = Arc::new(TestApp::spawn().await);
    // One after the other.
    let channel = stars_channel(&app, -3001, None).await;
    let s = subscriber(&app, 701).await;
    let (order_id, reference) = order(&app, s, channel).await;
    assert_eq!(
        pre_checkout(&app, "pay-twice", 701, &reference).await["ok"],
        true
    );
    pay(&app, "charge-twice", 701, &reference).await;
    let (_, status, expires) = membership(&app, s, channel).await.expect("member");
    pay(&app, "charge-twice", 701, &reference).await;
    assert_eq!(
        payment(&app, "charge-twice").await,
        ("applied".into(), None)
    );
    assert_eq!(order_status(&app, order_id).await, "paid");
    let (membership_id, status2, expires2) = membership(&app, s, channel).await.unwrap();
    assert_eq!(
        (status2, expires2),
        (status, expires),
        "no second extension"
    );
    let events = count(
        &app,
        "SELECT count(*) FROM membership_events WHERE membership_id = $1",
        &[&membership_id],
    )
    .await;
    assert_eq!(events, 1);

    // Concurrently, many rounds.
    for round in 0..ROUNDS as i64 {
        let channel = stars_channel(&app, -3100 - round, Some(3)).await;
        let buyer = 800 + round;
        let s = subscriber(&app, buyer).await;
        let (_, reference) = order(&app, s, channel).await;
        let q = format!("q-conc-{round}");
        assert_eq!(pre_checkout(&app, &q, buyer, &reference).await["ok"], true);
        let charge = format!("charge-conc-{round}");
        let update = payment_update(&charge, buyer, &reference, "XTR", PRICE);
        let barrier = Arc::new(Barrier::new(5));
        let tasks: Vec<_> = (0..5)
            .map(|_| {
                let (app, barrier, update) = (app.clone(), barrier.clone(), update.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    app.post_telegram_update(update).await
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap().expect(200), json!({}));
        }
        let payments = count(
            &app,
            "SELECT count(*) FROM payments WHERE external_id = $1",
            &[&charge],
        )
        .await;
        assert_eq!(payments, 1, "round {round}");
        assert_eq!(payment(&app, &charge).await, ("applied".into(), None));
        let (membership_id, status, _) = membership(&app, s, channel).await.unwrap();
        assert_eq!(status, "active");
        let events = count(
            &app,
            "SELECT count(*) FROM membership_events WHERE membership_id = $1",
            &[&membership_id],
        )
        .await;
        assert_eq!(events, 1, "round {round}: one membership decision");
    }
}

#[tokio::test]
async fn a_late_payment_after_the_hold_expired_keeps_the_next_buyers_seat() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -4001, Some(1)).await;
    let (a, b) = (subscriber(&app, 901).await, subscriber(&app, 902).await);
    let (order_a, ref_a) = order(&app, a, channel).await;
    let (order_b, ref_b) = order(&app, b, channel).await;
    assert_eq!(pre_checkout(&app, "late-a", 901, &ref_a).await["ok"], true);
    // While A holds the only seat, B is refused.
    let refused = pre_checkout(&app, "late-b-1", 902, &ref_b).await;
    assert_eq!(refused["error_message"], SEAT_TAKEN);
    expire_hold(&app, order_a).await;
    // Now the seat is free for B.
    assert_eq!(
        pre_checkout(&app, "late-b-2", 902, &ref_b).await["ok"],
        true
    );
    let b_hold = hold_until(&app, order_b).await.expect("B holds the seat");

    // A's stars arrive late.
    pay(&app, "charge-late-a", 901, &ref_a).await;
    assert_eq!(
        payment(&app, "charge-late-a").await,
        ("refund_pending".into(), Some("hold_expired".into()))
    );
    assert!(
        membership(&app, a, channel).await.is_none(),
        "A got no seat"
    );
    assert_eq!(order_status(&app, order_a).await, "pending");
    assert_eq!(
        hold_until(&app, order_b).await,
        Some(b_hold),
        "B's hold intact"
    );

    pay(&app, "charge-b", 902, &ref_b).await;
    assert_eq!(payment(&app, "charge-b").await, ("applied".into(), None));
    assert_eq!(membership(&app, b, channel).await.unwrap().1, "active");
}

#[tokio::test]
async fn an_old_orders_payment_does_not_use_the_new_orders_hold() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -5001, Some(1)).await;
    let s = subscriber(&app, 1101).await;
    let (old_order, old_ref) = order(&app, s, channel).await;
    assert_eq!(
        pre_checkout(&app, "old-1", 1101, &old_ref).await["ok"],
        true
    );
    expire_hold(&app, old_order).await;
    // The old invoice is dead; the buyer orders again and holds the seat anew.
    assert_eq!(
        pre_checkout(&app, "old-2", 1101, &old_ref).await["error_message"],
        EXPIRED
    );
    let (new_order, new_ref) = order(&app, s, channel).await;
    // Not before the cooldown after an unpaid hold has passed.
    let early = pre_checkout(&app, "new-0", 1101, &new_ref).await;
    assert_eq!(early["ok"], false, "{early}");
    assert_eq!(
        decision(&app, "new-0").await.1.as_deref(),
        Some("hold_limited")
    );
    app.db()
        .await
        .execute(
            "UPDATE orders SET hold_until = statement_timestamp() - interval '301 seconds'
             WHERE id = $1",
            &[&old_order],
        )
        .await
        .unwrap();
    assert_eq!(
        pre_checkout(&app, "new-1", 1101, &new_ref).await["ok"],
        true
    );
    let new_hold = hold_until(&app, new_order).await.expect("new order holds");

    pay(&app, "charge-old", 1101, &old_ref).await;
    assert_eq!(
        payment(&app, "charge-old").await,
        ("refund_pending".into(), Some("hold_expired".into()))
    );
    assert!(membership(&app, s, channel).await.is_none());
    assert_eq!(hold_until(&app, new_order).await, Some(new_hold));

    pay(&app, "charge-new", 1101, &new_ref).await;
    assert_eq!(payment(&app, "charge-new").await, ("applied".into(), None));
    assert_eq!(order_status(&app, new_order).await, "paid");
    assert_eq!(order_status(&app, old_order).await, "pending");
    assert_eq!(membership(&app, s, channel).await.unwrap().1, "active");
}

#[tokio::test]
async fn a_lost_answer_resent_gets_the_same_decision_and_the_hold_lasts_until_payment() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -6001, Some(1)).await;
    let (a, b) = (subscriber(&app, 1201).await, subscriber(&app, 1202).await);
    let (order_a, ref_a) = order(&app, a, channel).await;
    let (_, ref_b) = order(&app, b, channel).await;
    let first = pre_checkout(&app, "lost-1", 1201, &ref_a).await;
    assert_eq!(first["ok"], true);
    let held = hold_until(&app, order_a).await.unwrap();
    // Telegram did not get our answer and asks again, with the same query id.
    let resent = pre_checkout(&app, "lost-1", 1201, &ref_a).await;
    assert_eq!(resent, first);
    assert_eq!(hold_until(&app, order_a).await, Some(held));
    // The hold was not released: another buyer still cannot take the seat.
    assert_eq!(
        pre_checkout(&app, "lost-b", 1202, &ref_b).await["ok"],
        false
    );
    // The payment uses the hold.
    pay(&app, "charge-lost", 1201, &ref_a).await;
    assert_eq!(payment(&app, "charge-lost").await, ("applied".into(), None));
    assert_eq!(hold_until(&app, order_a).await, Some(held));
    // Paid, A's membership now takes the seat.
    assert_eq!(
        pre_checkout(&app, "lost-b-2", 1202, &ref_b).await["error_message"],
        SEAT_TAKEN
    );
    // The stored decision also survives its hold: re-sent after expiry it is unchanged.
    let channel2 = stars_channel(&app, -6002, Some(1)).await;
    let (order_c, ref_c) = order(&app, a, channel2).await;
    assert_eq!(pre_checkout(&app, "lost-2", 1201, &ref_c).await["ok"], true);
    let held_c = hold_until(&app, order_c).await.unwrap();
    expire_hold(&app, order_c).await;
    let expired = hold_until(&app, order_c).await;
    assert_eq!(pre_checkout(&app, "lost-2", 1201, &ref_c).await["ok"], true);
    assert_eq!(hold_until(&app, order_c).await, expired, "no new hold");
    assert_eq!(decision(&app, "lost-2").await.2, Some(held_c));
}

#[tokio::test]
async fn a_retry_with_a_new_query_is_approved_while_the_hold_is_valid_never_extending_it() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -7001, Some(1)).await;
    let s = subscriber(&app, 1301).await;
    let (order_id, reference) = order(&app, s, channel).await;
    assert_eq!(
        pre_checkout(&app, "retry-1", 1301, &reference).await["ok"],
        true
    );
    let held = hold_until(&app, order_id).await.unwrap();
    let second = pre_checkout(&app, "retry-2", 1301, &reference).await;
    assert_eq!(second["ok"], true);
    assert_eq!(hold_until(&app, order_id).await, Some(held), "not extended");
    assert_eq!(decision(&app, "retry-2").await, (true, None, Some(held)));

    expire_hold(&app, order_id).await;
    let expired_at = hold_until(&app, order_id).await;
    let third = pre_checkout(&app, "retry-3", 1301, &reference).await;
    assert_eq!(third["ok"], false);
    assert_eq!(third["error_message"], EXPIRED);
    assert_eq!(
        decision(&app, "retry-3").await,
        (false, Some("hold_expired".into()), None)
    );
    assert_eq!(
        hold_until(&app, order_id).await,
        expired_at,
        "an expired hold is not renewed"
    );
}

#[tokio::test]
async fn a_paying_member_renews_on_a_full_channel_without_a_hold() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -8001, Some(1)).await;
    let member = subscriber(&app, 1401).await;
    let stranger = subscriber(&app, 1402).await;
    let (first, first_ref) = order(&app, member, channel).await;
    assert_eq!(
        pre_checkout(&app, "renew-0", 1401, &first_ref).await["ok"],
        true
    );
    pay(&app, "charge-renew-0", 1401, &first_ref).await;
    assert_eq!(order_status(&app, first).await, "paid");
    let (membership_id, _, expires) = membership(&app, member, channel).await.unwrap();

    // The channel is full: a stranger is refused.
    let (_, stranger_ref) = order(&app, stranger, channel).await;
    assert_eq!(
        pre_checkout(&app, "renew-stranger", 1402, &stranger_ref).await["error_message"],
        SEAT_TAKEN
    );
    // The member renews: approved, no hold needed.
    let (renewal, renewal_ref) = order(&app, member, channel).await;
    assert_eq!(
        pre_checkout(&app, "renew-1", 1401, &renewal_ref).await["ok"],
        true
    );
    assert_eq!(hold_until(&app, renewal).await, None);
    assert_eq!(decision(&app, "renew-1").await, (true, None, None));
    pay(&app, "charge-renew-1", 1401, &renewal_ref).await;
    assert_eq!(
        payment(&app, "charge-renew-1").await,
        ("applied".into(), None)
    );
    let (_, status, renewed) = membership(&app, member, channel).await.unwrap();
    assert_eq!(status, "active");
    assert_eq!(
        renewed,
        expires + chrono::Duration::days(30),
        "one more period"
    );
    let events = count(
        &app,
        "SELECT count(*) FROM membership_events WHERE membership_id = $1",
        &[&membership_id],
    )
    .await;
    assert_eq!(events, 2);
}

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
    assert_eq!(hold_until(&app, order_id).await, None);
    assert!(membership(&app, s, channel).await.is_none());
    assert_eq!(order_status(&app, order_id).await, "pending");

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
    assert!(membership(&app, s, channel).await.is_none());
    let events = count(&app, "SELECT count(*) FROM membership_events", &[]).await;
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

// ---- join requests ----

#[tokio::test]
async fn join_requests_are_approved_for_members_only() {
    let app = TestApp::spawn().await;
    let chat = -10_001;
    let channel = app
        .create_channel(
            chat,
            json!({"currency": "XTR", "price_minor": PRICE, "grace_period_days": 3}),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let member = subscriber(&app, 1701).await;
    let lapsed = subscriber(&app, 1702).await;
    let in_grace = subscriber(&app, 1703).await;
    let unswept = subscriber(&app, 1704).await;

    let (_, reference) = order(&app, member, channel).await;
    assert_eq!(
        pre_checkout(&app, "join-pay", 1701, &reference).await["ok"],
        true
    );
    pay(&app, "charge-join", 1701, &reference).await;

    let ask = |user: i64| {
        let app = &app;
        async move {
            let r = app
                .post_telegram_update(join_request_update(chat, user))
                .await;
            let body = r.expect(200);
            assert_eq!(body["chat_id"], chat);
            assert_eq!(body["user_id"], user);
            body["method"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(ask(1701).await, "approveChatJoinRequest", "paid member");
    assert_eq!(ask(4242).await, "declineChatJoinRequest", "stranger");
    // A member of another chat asks to join a chat we do not know.
    let r = app
        .post_telegram_update(join_request_update(-99, 1701))
        .await;
    assert_eq!(r.expect(200)["method"], "declineChatJoinRequest");

    let grant = |subscriber_id: i64| {
        let app = &app;
        async move {
            app.post(
                "/api/memberships",
                json!({"subscriber_id": subscriber_id, "channel_id": channel, "days": 30}),
            )
            .await
            .expect(201)["id"]
                .as_i64()
                .unwrap()
        }
    };
    let m = grant(lapsed).await;
    let past = (Utc::now() - chrono::Duration::days(10)).to_rfc3339();
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"status": "expired", "expires_at": past}),
    )
    .await
    .expect(200);
    assert_eq!(ask(1702).await, "declineChatJoinRequest", "expired member");

    let m = grant(in_grace).await;
    let yesterday = (Utc::now() - chrono::Duration::days(1)).to_rfc3339();
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"status": "grace", "expires_at": yesterday}),
    )
    .await
    .expect(200);
    assert_eq!(ask(1703).await, "approveChatJoinRequest", "member in grace");

    // Still `active` because the sweep has not run, but past term and grace: not let in.
    let m = grant(unswept).await;
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"expires_at": past}),
    )
    .await
    .expect(200);
    assert_eq!(
        ask(1704).await,
        "declineChatJoinRequest",
        "lapsed, not yet swept"
    );
}

// ---- the door itself ----

#[tokio::test]
async fn the_secret_token_is_required() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -11_001, None).await;
    let s = subscriber(&app, 1801).await;
    let (_, reference) = order(&app, s, channel).await;
    let update = payment_update("charge-auth", 1801, &reference, "XTR", PRICE).to_string();
    let send = |secret: Option<&'static str>| {
        let (app, update) = (&app, update.clone());
        async move {
            let mut headers = vec![("content-type", "application/json")];
            if let Some(s) = secret {
                headers.push(("x-telegram-bot-api-secret-token", s));
            }
            app.request(Method::POST, "/api/webhook/telegram", &headers, update)
                .await
        }
    };
    for secret in [None, Some("wrong-secret-token-0123456789"), Some("")] {
        let r = send(secret).await;
        assert_eq!(r.status, 401, "{secret:?}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert!(r.header("www-authenticate").is_none());
    }
    // A prefix of the right secret is not the secret.
    let prefix: &'static str = &TELEGRAM_SECRET[..TELEGRAM_SECRET.len() - 1];
    assert_eq!(send(Some(prefix)).await.status, 401);
    let payments = count(&app, "SELECT count(*) FROM payments", &[]).await;
    assert_eq!(payments, 0, "nothing stored for a 401");

    assert_eq!(send(Some(TELEGRAM_SECRET)).await.expect(200), json!({}));
    assert_eq!(payment(&app, "charge-auth").await, ("applied".into(), None));
}

#[tokio::test]
async fn an_unset_secret_closes_the_door() {
    let app = TestApp::spawn_with(|env| {
        env.insert("TELEGRAM_WEBHOOK_SECRET".into(), String::new());
    })
    .await;
    let r = app
        .post_telegram_update(pre_checkout_update("closed", 1, "ord_x", "XTR", PRICE))
        .await;
    r.expect(503);
    let decisions = count(&app, "SELECT count(*) FROM pre_checkout_decisions", &[]).await;
    assert_eq!(decisions, 0);
}

#[tokio::test]
async fn malformed_bodies_are_400_and_unknown_updates_are_ignored() {
    let app = TestApp::spawn().await;
    let raw = |body: &'static str| {
        let app = &app;
        async move {
            app.request(
                Method::POST,
                "/api/webhook/telegram",
                &[
                    ("content-type", "application/json"),
                    ("x-telegram-bot-api-secret-token", TELEGRAM_SECRET),
                ],
                body,
            )
            .await
        }
    };
    for body in [
        "",
        "{",
        "not json",
        "[]",
        r#"{"message": {}}"#,
        r#"{"update_id": "x"}"#,
        r#"{"update_id": 1, "pre_checkout_query": {"id": "q"}}"#,
        r#"{"update_id": 1, "message": {"message_id": 1, "date": 1, "chat": {"id": 1},
            "successful_payment": {"currency": "XTR"}}}"#,
    ] {
        let r = raw(body).await;
        assert_eq!(
            r.status,
            400,
            "{body}: {}",
            String::from_utf8_lossy(&r.bytes)
        );
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
    }
    // Well-formed but impossible values: 422, nothing stored.
    let mut bad = payment_update("", 1, "ord_x", "XTR", PRICE);
    let r = app.post_telegram_update(bad.clone()).await;
    r.expect(422);
    bad["message"]["successful_payment"]["telegram_payment_charge_id"] = json!("c-1");
    bad["message"]["successful_payment"]["currency"] = json!("xtr");
    app.post_telegram_update(bad).await.expect(422);
    assert_eq!(count(&app, "SELECT count(*) FROM payments", &[]).await, 0);

    // Updates the bot does not handle. (Commands and button presses are the buyer
    // conversation's: tests/api/bot.rs.)
    let ignored = [
        json!({"update_id": 1}),
        json!({"update_id": 2, "edited_message": {"message_id": 1, "date": 1700000000,
            "chat": {"id": 5, "type": "private"}, "from": {"id": 5, "is_bot": false,
            "first_name": "A"}, "text": "/start"}}),
        json!({"update_id": 3, "channel_post": {"message_id": 1, "date": 1700000000,
            "chat": {"id": -100, "type": "channel"}, "text": "/start"}}),
        json!({"update_id": 4, "my_chat_member": {"chat": {"id": -1}, "date": 1}}),
    ];
    for update in ignored {
        let r = app.post_telegram_update(update.clone()).await;
        assert_eq!(r.expect(200), json!({}), "{update}");
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
}

#[tokio::test]
async fn a_database_stall_at_pre_checkout_is_an_unstored_try_again() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -12_001, Some(1)).await;
    let s = subscriber(&app, 1901).await;
    let (order_id, reference) = order(&app, s, channel).await;

    // Another transaction holds the order row (as a long payment would).
    let mut blocker = app.db().await;
    let tx = blocker.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM orders WHERE id = $1 FOR UPDATE",
        &[&order_id],
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let busy = pre_checkout(&app, "stall-1", 1901, &reference).await;
    let took = started.elapsed();
    assert_eq!(busy["ok"], false);
    assert_eq!(busy["error_message"], BUSY);
    assert!(
        took < std::time::Duration::from_secs(6),
        "answered in {took:?}"
    );
    tx.rollback().await.unwrap();

    let stored = count(&app, "SELECT count(*) FROM pre_checkout_decisions", &[]).await;
    assert_eq!(stored, 0, "a refusal forced by the timeout is not stored");
    assert_eq!(hold_until(&app, order_id).await, None);
    // Telegram asks again with the same query: decided for real this time.
    assert_eq!(
        pre_checkout(&app, "stall-1", 1901, &reference).await["ok"],
        true
    );
    assert!(hold_until(&app, order_id).await.is_some());
}

#[tokio::test]
async fn a_database_outage_refuses_pre_checkout_and_makes_telegram_retry_payments() {
    // A state over a database that refuses connections; no TestApp (it needs a database).
    let mut env = crate::support::helpers::test_env("postgres://postgres@127.0.0.1:1/none");
    env.remove("ADMIN_EMAIL");
    env.remove("ADMIN_PASSWORD");
    let config = subgate::Config::from_lookup(|k| env.get(k).cloned()).unwrap();
    let pool = subgate::db::pool(config.database_url.expose(), 2).unwrap();
    let state = subgate::AppState::new(config, pool).await.unwrap();
    let router = subgate::router(state);
    let send = |update: Value| {
        let router = router.clone();
        async move {
            use http_body_util::BodyExt;
            use tower::ServiceExt;
            let req = axum::http::Request::post("/api/webhook/telegram")
                .header("content-type", "application/json")
                .header("x-telegram-bot-api-secret-token", TELEGRAM_SECRET)
                .body(axum::body::Body::from(update.to_string()))
                .unwrap();
            let r = router.oneshot(req).await.unwrap();
            let status = r.status().as_u16();
            let bytes = r.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap())
        }
    };
    let (status, body) = send(pre_checkout_update("down", 1, "ord_x", "XTR", PRICE)).await;
    assert_eq!(status, 200);
    assert_eq!(body["ok"], false);
    assert_eq!(body["error_message"], BUSY);
    let (status, _) = send(payment_update("c-down", 1, "ord_x", "XTR", PRICE)).await;
    assert_eq!(status, 503, "Telegram must deliver the payment again");
    let (status, _) = send(join_request_update(-1, 1)).await;
    assert_eq!(status, 503);
}

/// A `pre_checkout_query` whose id or payload Telegram never sends (an id the decisions table
/// cannot key, a NUL PostgreSQL text cannot hold) is refused with 422 before any decision,
/// like a `successful_payment` with impossible values; nothing is stored.
#[tokio::test]
async fn a_pre_checkout_query_with_values_telegram_never_sends_is_422() {
    let app = TestApp::spawn().await;
    let channel = stars_channel(&app, -5200, None).await;
    let buyer = subscriber(&app, 5200).await;
    let (_, reference) = order(&app, buyer, channel).await;
    let long_id = "q".repeat(256);
    for (query_id, payload, field) in [
        ("", reference.as_str(), "pre_checkout_query.id"),
        (
            long_id.as_str(),
            reference.as_str(),
            "pre_checkout_query.id",
        ),
        ("q\0nul", reference.as_str(), "pre_checkout_query.id"),
        (
            "q-nul-payload",
            "ord_\0",
            "pre_checkout_query.invoice_payload",
        ),
    ] {
        let r = app
            .post_telegram_update(pre_checkout_update(query_id, 5200, payload, "XTR", PRICE))
            .await;
        let body = r.expect(422);
        assert!(body["errors"].get(field).is_some(), "{query_id:?}: {body}");
    }
    let decisions = count(&app, "SELECT count(*) FROM pre_checkout_decisions", &[]).await;
    assert_eq!(decisions, 0);
}
