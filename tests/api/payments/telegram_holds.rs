//! Door 3's Stars pre-checkout and seat holds: two orders racing for the last seat, an update
//! or a payment delivered twice, late payments after a hold expired, a lost answer resent, a
//! retry with a new query, and a paying member renewing on a full channel.

use std::sync::Arc;

use serde_json::json;

use crate::{
    payments::telegram_door::{
        PRICE, answer_of, decision, order, pay, payment, payment_update, pre_checkout,
        pre_checkout_update, stars_channel, subscriber,
    },
    support::{
        helpers::TestApp,
        race::race,
        rows::{MembershipRow, count, expire_hold, membership_row, order_row},
    },
};

const ROUNDS: usize = 20;

const SEAT_TAKEN: &str =
    "This seat has just been taken. Please choose another channel or group, or try later.";

const EXPIRED: &str = "This invoice has expired. Please start a new order.";

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
        let answers = race(orders.len(), |i| {
            let (buyer, (_, reference)) = &orders[i];
            let (app, buyer, reference) = (app.clone(), *buyer, reference.clone());
            let query_id = format!("race-{round}-{buyer}");
            async move {
                let body = pre_checkout(&app, &query_id, buyer, &reference).await;
                (query_id, body)
            }
        })
        .await;
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
            "orders WHERE channel_id = $1 AND hold_until IS NOT NULL",
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
    let held = order_row(&app, order_id)
        .await
        .hold_until
        .expect("approved order holds the seat");
    let again = answer_of(&app.post_telegram_update(update).await, "dup-1");
    assert_eq!(again, first);
    assert_eq!(
        order_row(&app, order_id).await.hold_until,
        Some(held),
        "hold not extended"
    );
    let decisions = app.count("pre_checkout_decisions").await;
    assert_eq!(decisions, 1);

    // At the same moment, many rounds: five copies of one query each round.
    for round in 0..ROUNDS as i64 {
        let channel = stars_channel(&app, -2100 - round, Some(1)).await;
        let buyer = 600 + round;
        let s = subscriber(&app, buyer).await;
        let (order_id, reference) = order(&app, s, channel).await;
        let query_id = format!("dup-round-{round}");
        let update = pre_checkout_update(&query_id, buyer, &reference, "XTR", PRICE);
        for answer in race(5, |_| {
            let (app, update) = (app.clone(), update.clone());
            async move { app.post_telegram_update(update).await }
        })
        .await
        {
            let body = answer_of(&answer, &query_id);
            assert_eq!(body["ok"], true, "round {round}: {body}");
        }
        let held = order_row(&app, order_id).await.hold_until.expect("held");
        let (ok, _, decided_hold) = decision(&app, &query_id).await;
        assert!(ok);
        assert_eq!(
            decided_hold,
            Some(held),
            "round {round}: the hold was set once"
        );
        let n = count(
            &app,
            "pre_checkout_decisions WHERE query_id = $1",
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
    let MembershipRow {
        status,
        expires_at: expires,
        ..
    } = membership_row(&app, s, channel).await.expect("member");
    pay(&app, "charge-twice", 701, &reference).await;
    assert_eq!(
        payment(&app, "charge-twice").await,
        ("applied".into(), None)
    );
    assert_eq!(order_row(&app, order_id).await.status, "paid");
    let MembershipRow {
        id: membership_id,
        status: status2,
        expires_at: expires2,
    } = membership_row(&app, s, channel).await.unwrap();
    assert_eq!(
        (status2, expires2),
        (status, expires),
        "no second extension"
    );
    let events = count(
        &app,
        "membership_events WHERE membership_id = $1",
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
        for answer in race(5, |_| {
            let (app, update) = (app.clone(), update.clone());
            async move { app.post_telegram_update(update).await }
        })
        .await
        {
            assert_eq!(answer.expect(200), json!({}));
        }
        let payments = count(&app, "payments WHERE external_id = $1", &[&charge]).await;
        assert_eq!(payments, 1, "round {round}");
        assert_eq!(payment(&app, &charge).await, ("applied".into(), None));
        let MembershipRow {
            id: membership_id,
            status,
            ..
        } = membership_row(&app, s, channel).await.unwrap();
        assert_eq!(status, "active");
        let events = count(
            &app,
            "membership_events WHERE membership_id = $1",
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
    expire_hold(&app, order_a, 1).await;
    // Now the seat is free for B.
    assert_eq!(
        pre_checkout(&app, "late-b-2", 902, &ref_b).await["ok"],
        true
    );
    let b_hold = order_row(&app, order_b)
        .await
        .hold_until
        .expect("B holds the seat");

    // A's stars arrive late.
    pay(&app, "charge-late-a", 901, &ref_a).await;
    assert_eq!(
        payment(&app, "charge-late-a").await,
        ("refund_pending".into(), Some("hold_expired".into()))
    );
    assert!(
        membership_row(&app, a, channel).await.is_none(),
        "A got no seat"
    );
    assert_eq!(order_row(&app, order_a).await.status, "pending");
    assert_eq!(
        order_row(&app, order_b).await.hold_until,
        Some(b_hold),
        "B's hold intact"
    );

    pay(&app, "charge-b", 902, &ref_b).await;
    assert_eq!(payment(&app, "charge-b").await, ("applied".into(), None));
    assert_eq!(
        membership_row(&app, b, channel).await.unwrap().status,
        "active"
    );
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
    expire_hold(&app, old_order, 1).await;
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
    expire_hold(&app, old_order, 301).await;
    assert_eq!(
        pre_checkout(&app, "new-1", 1101, &new_ref).await["ok"],
        true
    );
    let new_hold = order_row(&app, new_order)
        .await
        .hold_until
        .expect("new order holds");

    pay(&app, "charge-old", 1101, &old_ref).await;
    assert_eq!(
        payment(&app, "charge-old").await,
        ("refund_pending".into(), Some("hold_expired".into()))
    );
    assert!(membership_row(&app, s, channel).await.is_none());
    assert_eq!(order_row(&app, new_order).await.hold_until, Some(new_hold));

    pay(&app, "charge-new", 1101, &new_ref).await;
    assert_eq!(payment(&app, "charge-new").await, ("applied".into(), None));
    assert_eq!(order_row(&app, new_order).await.status, "paid");
    assert_eq!(order_row(&app, old_order).await.status, "pending");
    assert_eq!(
        membership_row(&app, s, channel).await.unwrap().status,
        "active"
    );
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
    let held = order_row(&app, order_a).await.hold_until.unwrap();
    // Telegram did not get our answer and asks again, with the same query id.
    let resent = pre_checkout(&app, "lost-1", 1201, &ref_a).await;
    assert_eq!(resent, first);
    assert_eq!(order_row(&app, order_a).await.hold_until, Some(held));
    // The hold was not released: another buyer still cannot take the seat.
    assert_eq!(
        pre_checkout(&app, "lost-b", 1202, &ref_b).await["ok"],
        false
    );
    // The payment uses the hold.
    pay(&app, "charge-lost", 1201, &ref_a).await;
    assert_eq!(payment(&app, "charge-lost").await, ("applied".into(), None));
    assert_eq!(order_row(&app, order_a).await.hold_until, Some(held));
    // Paid, A's membership now takes the seat.
    assert_eq!(
        pre_checkout(&app, "lost-b-2", 1202, &ref_b).await["error_message"],
        SEAT_TAKEN
    );
    // The stored decision also survives its hold: re-sent after expiry it is unchanged.
    let channel2 = stars_channel(&app, -6002, Some(1)).await;
    let (order_c, ref_c) = order(&app, a, channel2).await;
    assert_eq!(pre_checkout(&app, "lost-2", 1201, &ref_c).await["ok"], true);
    let held_c = order_row(&app, order_c).await.hold_until.unwrap();
    expire_hold(&app, order_c, 1).await;
    let expired = order_row(&app, order_c).await.hold_until;
    assert_eq!(pre_checkout(&app, "lost-2", 1201, &ref_c).await["ok"], true);
    assert_eq!(
        order_row(&app, order_c).await.hold_until,
        expired,
        "no new hold"
    );
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
    let held = order_row(&app, order_id).await.hold_until.unwrap();
    let second = pre_checkout(&app, "retry-2", 1301, &reference).await;
    assert_eq!(second["ok"], true);
    assert_eq!(
        order_row(&app, order_id).await.hold_until,
        Some(held),
        "not extended"
    );
    assert_eq!(decision(&app, "retry-2").await, (true, None, Some(held)));

    expire_hold(&app, order_id, 1).await;
    let expired_at = order_row(&app, order_id).await.hold_until;
    let third = pre_checkout(&app, "retry-3", 1301, &reference).await;
    assert_eq!(third["ok"], false);
    assert_eq!(third["error_message"], EXPIRED);
    assert_eq!(
        decision(&app, "retry-3").await,
        (false, Some("hold_expired".into()), None)
    );
    assert_eq!(
        order_row(&app, order_id).await.hold_until,
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
    assert_eq!(order_row(&app, first).await.status, "paid");
    let MembershipRow {
        id: membership_id,
        expires_at: expires,
        ..
    } = membership_row(&app, member, channel).await.unwrap();

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
    assert_eq!(order_row(&app, renewal).await.hold_until, None);
    assert_eq!(decision(&app, "renew-1").await, (true, None, None));
    pay(&app, "charge-renew-1", 1401, &renewal_ref).await;
    assert_eq!(
        payment(&app, "charge-renew-1").await,
        ("applied".into(), None)
    );
    let MembershipRow {
        status,
        expires_at: renewed,
        ..
    } = membership_row(&app, member, channel).await.unwrap();
    assert_eq!(status, "active");
    assert_eq!(
        renewed,
        expires + chrono::Duration::days(30),
        "one more period"
    );
    let events = count(
        &app,
        "membership_events WHERE membership_id = $1",
        &[&membership_id],
    )
    .await;
    assert_eq!(events, 2);
}
