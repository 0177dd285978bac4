//! Seats and holds as the bot takes them: two buyers racing for the last seat (by card and with
//! Stars), an invoice or card link superseded by a new press, late payments judged by the
//! seats, the cooldown after a hold runs out and the daily cap under concurrent presses and
//! pre-checkouts, and a card link open no longer than its hold. Holds are expired by
//! back-dating `orders.hold_until`, never by sleeping.

use std::{collections::HashMap, sync::Arc};

use chrono::Duration;
use serde_json::json;

use crate::{
    bot::conversation::{
        ALREADY_SENT, ON_ITS_WAY, ROUNDS, app_with, assert_answer, button_update, buttons, channel,
        membership_of, messages_to, orders_of, payment_update, pending, person,
        pre_checkout_update, run, send, stars_channel, text_update,
    },
    support::{
        fake_bot::FakeBot,
        helpers::{TestApp, assert_wayforpay_accept, wayforpay_callback},
        race::race,
        rows::{PaymentRow, count, expire_hold, order_row, payment},
    },
};

// ---- seats ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_buyers_racing_for_the_last_card_seat_one_gets_the_link() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    for round in 0..ROUNDS {
        let c = channel(
            &app,
            -100_300_000 - round,
            json!({"seat_limit": 1, "title": format!("Seat {round}")}),
        )
        .await;
        let users = [7_200 + 2 * round, 7_201 + 2 * round];
        let answers = race(2, |i| {
            let (app, u) = (app.clone(), users[i]);
            let press = button_update(&person(u), &format!("b:{c}"));
            async move { (u, send(&app, &press).await) }
        })
        .await;
        let (won, lost): (Vec<_>, Vec<_>) =
            answers.iter().partition(|(_, a)| a["text"] == ON_ITS_WAY);
        assert_eq!(
            (won.len(), lost.len()),
            (1, 1),
            "round {round}: {answers:?}"
        );
        assert_eq!(
            lost[0].1["text"],
            format!("Sorry, «Seat {round}» is full right now. Please try again later.")
        );
        assert!(
            orders_of(&app, lost[0].0, c).await.is_empty(),
            "round {round}: no order for the loser"
        );
        let held = count(
            &app,
            "orders WHERE channel_id = $1 AND status = 'pending'
               AND hold_until > now()",
            &[&(c as i32)],
        )
        .await;
        assert_eq!(held, 1, "round {round}: the winner holds the seat");
    }
    assert_eq!(pending(&app, "invoice").await, ROUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stars_buyers_racing_for_the_last_seat_one_pays() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    for round in 0..ROUNDS {
        let c = stars_channel(&app, -100_400_000 - round, json!({"seat_limit": 1})).await;
        let users = [7_500 + 2 * round, 7_501 + 2 * round];
        // Both get an invoice: a Stars seat is held at pre-checkout.
        for &u in &users {
            let a = send(&app, &button_update(&person(u), &format!("b:{c}"))).await;
            assert_answer(&a, ON_ITS_WAY);
        }
        let mut references = Vec::new();
        for &u in &users {
            references.push(orders_of(&app, u, c).await[0].1.clone());
        }
        let answers = race(2, |i| {
            let (app, u, reference) = (app.clone(), users[i], references[i].clone());
            async move {
                let update = pre_checkout_update(&format!("race-{u}"), u, &reference, 250);
                (u, reference, send(&app, &update).await)
            }
        })
        .await;
        let approved: Vec<_> = answers.iter().filter(|(_, _, a)| a["ok"] == true).collect();
        assert_eq!(approved.len(), 1, "round {round}: {answers:?}");
        let (winner, reference, _) = approved[0];
        send(
            &app,
            &payment_update(&format!("race-ch-{winner}"), *winner, reference, 250, None),
        )
        .await;
        let members = count(
            &app,
            "memberships WHERE channel_id = $1 AND status = 'active'",
            &[&(c as i32)],
        )
        .await;
        assert_eq!(members, 1, "round {round}");
        // The channel is full now: the catalogue says so to the other buyer.
        let loser = users.iter().find(|u| *u != winner).unwrap();
        let reply = send(&app, &text_update(&person(*loser), &format!("/start c{c}"))).await;
        assert!(
            reply["text"].as_str().unwrap().contains("Full right now"),
            "{reply}"
        );
        assert!(buttons(&reply).is_empty());
    }
}

// ---- superseded orders and the hold rules ----

const HOLD_SECS: i64 = 300;

/// Makes the order look `secs` seconds old.
async fn age_order(app: &TestApp, order_id: i64, secs: i64) {
    app.db()
        .await
        .execute(
            "UPDATE orders SET created_at = statement_timestamp() - make_interval(secs => $2)
             WHERE id = $1",
            &[&order_id, &(secs as f64)],
        )
        .await
        .unwrap();
}

/// Holds ever granted to Telegram user `user` on `channel`.
async fn holds_of(app: &TestApp, user: i64, channel: i64) -> i64 {
    count(
        app,
        "orders o JOIN subscribers s ON s.id = o.subscriber_id
         WHERE s.telegram_user_id = $1 AND o.channel_id = $2 AND o.held_at IS NOT NULL",
        &[&user, &(channel as i32)],
    )
    .await
}

/// The `orderTimeout` of the card link sent last to `user`.
fn order_timeout_sent_to(fake: &FakeBot, user: i64) -> i64 {
    let message = fake
        .calls_of("sendMessage")
        .into_iter()
        .rfind(|c| c.params["chat_id"] == user)
        .expect("a card link was sent")
        .params;
    let (_, link) = buttons(&message)[0].clone();
    let q: HashMap<String, String> = url::Url::parse(&link)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    q["orderTimeout"].parse().unwrap()
}

#[tokio::test]
async fn an_approved_stars_invoice_is_superseded_not_cancelled_and_its_late_payment_applies() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_500_001, json!({})).await;
    let buyer = person(7601);
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    run(&app).await;
    assert_eq!(fake.calls_of("sendInvoice").len(), 1);
    let (old_id, old_ref, _) = orders_of(&app, 7601, c).await[0].clone();
    // Telegram approved it: the buyer may be paying right now.
    let ok = send(&app, &pre_checkout_update("q-sup-1", 7601, &old_ref, 250)).await;
    assert_eq!(ok["ok"], true, "{ok}");
    // Past the reuse window, the buyer presses again: a new order, the old one superseded.
    age_order(&app, old_id, 2 * 3600).await;
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ON_ITS_WAY,
    );
    let orders = orders_of(&app, 7601, c).await;
    assert_eq!(orders.len(), 2, "{orders:?}");
    let old = order_row(&app, old_id).await;
    assert_eq!((old.status.as_str(), old.superseded), ("pending", true));
    let new = order_row(&app, orders[1].0).await;
    assert_eq!((new.status.as_str(), new.superseded), ("pending", false));
    // Never offered again: the next press reuses the new order.
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ALREADY_SENT,
    );
    assert_eq!(orders_of(&app, 7601, c).await.len(), 2);

    // The approved payment arrives late: no seat limit, so it applies.
    send(&app, &payment_update("ch-sup-1", 7601, &old_ref, 250, None)).await;
    assert_eq!(
        payment(&app, "ch-sup-1").await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: false
        }
    );
    assert_eq!(membership_of(&app, 7601, c).await.unwrap().0, "active");
    let old = order_row(&app, old_id).await;
    assert_eq!((old.status.as_str(), old.superseded), ("paid", true));
    // The new order's invoice is sent, once.
    run(&app).await;
    assert_eq!(fake.calls_of("sendInvoice").len(), 2);
}

#[tokio::test]
async fn a_superseded_stars_order_paid_after_its_hold_is_refunded_and_holds_no_seat() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_500_002, json!({"seat_limit": 1})).await;
    let buyer = person(7602);
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    let (old_id, old_ref, _) = orders_of(&app, 7602, c).await[0].clone();
    let ok = send(&app, &pre_checkout_update("q-sup-2", 7602, &old_ref, 250)).await;
    assert_eq!(ok["ok"], true, "{ok}");
    // The hold ran out (and so did the cooldown after it).
    expire_hold(&app, old_id, HOLD_SECS + 1).await;
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ON_ITS_WAY,
    );
    let orders = orders_of(&app, 7602, c).await;
    let old = order_row(&app, old_id).await;
    assert_eq!((old.status.as_str(), old.superseded), ("pending", true));
    let new_ref = orders[1].1.clone();
    // Somebody else takes the free seat meanwhile.
    let other = person(7603);
    send(&app, &button_update(&other, &format!("b:{c}"))).await;
    let (_, other_ref, _) = orders_of(&app, 7603, c).await[0].clone();
    let ok = send(&app, &pre_checkout_update("q-sup-3", 7603, &other_ref, 250)).await;
    assert_eq!(ok["ok"], true, "{ok}");

    // The late payment of the superseded order: hold_expired, refunded — not order_cancelled.
    send(&app, &payment_update("ch-sup-2", 7602, &old_ref, 250, None)).await;
    assert_eq!(
        payment(&app, "ch-sup-2").await,
        PaymentRow {
            outcome: "refund_pending".into(),
            reason: Some("hold_expired".into()),
            renewal: false
        }
    );
    assert!(membership_of(&app, 7602, c).await.is_none());
    // The other buyer's seat is intact, and the buyer's new order finds the channel full.
    send(
        &app,
        &payment_update("ch-sup-3", 7603, &other_ref, 250, None),
    )
    .await;
    assert_eq!(payment(&app, "ch-sup-3").await.outcome, "applied");
    let refused = send(&app, &pre_checkout_update("q-sup-4", 7602, &new_ref, 250)).await;
    assert_eq!(refused["ok"], false, "{refused}");
    let taken = count(
        &app,
        "memberships WHERE channel_id = $1 AND status = 'active'",
        &[&(c as i32)],
    )
    .await;
    assert_eq!(taken, 1);
}

#[tokio::test]
async fn a_card_order_pressed_again_is_superseded_and_its_late_callback_judged_by_the_seats() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;

    // No seat limit: the link was sent, the page's time passed, the buyer pressed again; the
    // payment on the old page still applies.
    let open = channel(&app, -100_500_003, json!({"title": "Open"})).await;
    let buyer = person(7604);
    send(&app, &button_update(&buyer, &format!("b:{open}"))).await;
    run(&app).await;
    let (old_id, old_ref, _) = orders_of(&app, 7604, open).await[0].clone();
    age_order(&app, old_id, HOLD_SECS + 1).await;
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{open}"))).await,
        ON_ITS_WAY,
    );
    let old = order_row(&app, old_id).await;
    assert_eq!((old.status.as_str(), old.superseded), ("pending", true));
    let body = wayforpay_callback(&old_ref, "199.00", "UAH", "Approved");
    assert_wayforpay_accept(&app.post_wayforpay(&body).await.expect(200), &old_ref);
    assert_eq!(
        payment(&app, &old_ref).await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: false
        }
    );
    assert_eq!(membership_of(&app, 7604, open).await.unwrap().0, "active");

    // One seat: the old hold ran out, the buyer pressed again and holds the seat anew (after
    // the cooldown); the old page's payment is hold_expired, for review, and takes nothing.
    let limited = channel(&app, -100_500_004, json!({"title": "One", "seat_limit": 1})).await;
    let buyer = person(7605);
    send(&app, &button_update(&buyer, &format!("b:{limited}"))).await;
    run(&app).await;
    let (old_id, old_ref, _) = orders_of(&app, 7605, limited).await[0].clone();
    expire_hold(&app, old_id, HOLD_SECS + 1).await;
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{limited}"))).await,
        ON_ITS_WAY,
    );
    let orders = orders_of(&app, 7605, limited).await;
    assert_eq!(orders.len(), 2);
    let old = order_row(&app, old_id).await;
    assert_eq!((old.status.as_str(), old.superseded), ("pending", true));
    let body = wayforpay_callback(&old_ref, "199.00", "UAH", "Approved");
    assert_wayforpay_accept(&app.post_wayforpay(&body).await.expect(200), &old_ref);
    assert_eq!(
        payment(&app, &old_ref).await,
        PaymentRow {
            outcome: "needs_review".into(),
            reason: Some("hold_expired".into()),
            renewal: false
        }
    );
    // One seat counted for the buyer, by the new order's hold; the old order counts none.
    let held = count(
        &app,
        "orders WHERE channel_id = $1 AND status = 'pending'
           AND hold_until > now()",
        &[&(limited as i32)],
    )
    .await;
    assert_eq!(held, 1);
    let reply = send(&app, &button_update(&person(7606), &format!("b:{limited}"))).await;
    assert_answer(
        &reply,
        "Sorry, «One» is full right now. Please try again later.",
    );
    // The new order's payment applies.
    let body = wayforpay_callback(&orders[1].1, "199.00", "UAH", "Approved");
    app.post_wayforpay(&body).await.expect(200);
    assert_eq!(payment(&app, &orders[1].1).await.outcome, "applied");
}

#[tokio::test]
async fn a_buyer_whose_hold_ran_out_waits_before_holding_again_and_is_told_when() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = channel(
        &app,
        -100_500_005,
        json!({"title": "Scarce", "seat_limit": 1}),
    )
    .await;
    let squatter = person(7607);
    send(&app, &button_update(&squatter, &format!("b:{c}"))).await;
    let (first, _, _) = orders_of(&app, 7607, c).await[0].clone();
    let ran_out = expire_hold(&app, first, 1).await;
    // Pressing again right away gets no new hold: an alert says when to try again.
    let reply = send(&app, &button_update(&squatter, &format!("b:{c}"))).await;
    // The minute from which the cooldown has passed (rounded up: database instants are whole
    // microseconds, so adding a minute less one microsecond and dropping the seconds rounds
    // up; adding 59 s would round an instant in the first second of a minute down).
    let allowed = ran_out + Duration::seconds(HOLD_SECS);
    let when = (allowed + Duration::seconds(60) - Duration::microseconds(1))
        .format("%Y-%m-%d %H:%M UTC")
        .to_string();
    assert_answer(
        &reply,
        &format!(
            "Your last seat hold on «Scarce» ran out before it was paid. \
             You can try again after {when}."
        ),
    );
    assert_eq!(reply["show_alert"], true);
    assert_eq!(holds_of(&app, 7607, c).await, 1, "no new hold");
    // The seat is free for a paying buyer meanwhile.
    let buyer = person(7608);
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ON_ITS_WAY,
    );
    assert_eq!(holds_of(&app, 7608, c).await, 1);
}

/// Concurrent presses of one buyer in their cooldown take no hold; at the edge of their daily
/// cap exactly one hold more, then none. The rows are checked every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_presses_never_take_holds_past_the_cooldown_or_the_daily_cap() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    let c = channel(
        &app,
        -100_500_006,
        json!({"title": "Capped", "seat_limit": 1000}),
    )
    .await;
    for round in 0..ROUNDS {
        let user = 7_700 + round;
        let buyer = person(user);
        let presses = |n| {
            let (app, buyer) = (&app, &buyer);
            race(n, move |_| {
                let app = app.clone();
                let press = button_update(buyer, &format!("b:{c}"));
                async move {
                    send(&app, &press).await["text"]
                        .as_str()
                        .unwrap()
                        .to_string()
                }
            })
        };
        // A first hold, run out a second ago: every press at once is held back by the cooldown.
        assert_answer(
            &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
            ON_ITS_WAY,
        );
        let first = orders_of(&app, user, c).await[0].0;
        expire_hold(&app, first, 1).await;
        for a in presses(4).await {
            assert!(
                a.starts_with("Your last seat hold on «Capped» ran out before it was paid.")
                    && a.contains("You can try again after"),
                "round {round}: {a}"
            );
        }
        assert_eq!(holds_of(&app, user, c).await, 1, "round {round}");
        // Past the cooldown, a second hold, run out long enough ago too.
        expire_hold(&app, first, HOLD_SECS + 1).await;
        assert_answer(
            &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
            ON_ITS_WAY,
        );
        let second = orders_of(&app, user, c).await.last().unwrap().0;
        expire_hold(&app, second, HOLD_SECS + 1).await;
        // The third hold of the day: one press takes it, the others reuse its order.
        let mut answers = presses(4).await;
        answers.sort();
        assert_eq!(
            answers,
            [ALREADY_SENT, ALREADY_SENT, ALREADY_SENT, ON_ITS_WAY],
            "round {round}"
        );
        assert_eq!(holds_of(&app, user, c).await, 3, "round {round}");
        // The third hold runs out too: the cap (3 a day) refuses every press, all at once.
        let last = orders_of(&app, user, c).await.last().unwrap().0;
        expire_hold(&app, last, HOLD_SECS + 1).await;
        let answers = presses(4).await;
        for a in &answers {
            assert!(
                a.starts_with("You have held a seat on «Capped» several times today")
                    && a.contains("You can try again after"),
                "round {round}: {a}"
            );
        }
        assert_eq!(holds_of(&app, user, c).await, 3, "round {round}");
        let pending_now = count(
            &app,
            "orders o JOIN subscribers s ON s.id = o.subscriber_id
             WHERE s.telegram_user_id = $1 AND o.status = 'pending' AND o.hold_until > now()",
            &[&user],
        )
        .await;
        assert_eq!(pending_now, 0, "round {round}: no valid hold");
    }
}

/// Pre-checkout applies the same hold rules as checkout: concurrent pre-checkouts of several
/// orders of one buyer at the edge of the daily cap approve exactly one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_pre_checkouts_respect_the_daily_cap() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    let c = stars_channel(&app, -100_500_007, json!({"seat_limit": 1000})).await;
    for round in 0..ROUNDS {
        let user = 7_800 + round;
        let subscriber = app.create_subscriber(user).await["id"].as_i64().unwrap();
        // Two holds today, run out long enough ago.
        for i in 0..2 {
            let o = app.create_order(subscriber, c).await;
            let reference = o["reference"].as_str().unwrap().to_string();
            let q = format!("cap-{round}-{i}");
            let ok = send(&app, &pre_checkout_update(&q, user, &reference, 250)).await;
            assert_eq!(ok["ok"], true, "round {round}: {ok}");
            expire_hold(&app, o["id"].as_i64().unwrap(), HOLD_SECS + 1).await;
        }
        let mut references = Vec::new();
        for _ in 0..4 {
            let o = app.create_order(subscriber, c).await;
            references.push(o["reference"].as_str().unwrap().to_string());
        }
        let answers = race(4, |i| {
            let app = app.clone();
            let update =
                pre_checkout_update(&format!("cap-{round}-r{i}"), user, &references[i], 250);
            async move { send(&app, &update).await }
        })
        .await;
        let mut approved = 0;
        for a in answers {
            if a["ok"] == true {
                approved += 1;
            } else {
                let message = a["error_message"].as_str().unwrap();
                assert!(
                    message.starts_with(
                        "You held a seat here recently without paying. Try again after"
                    ),
                    "round {round}: {a}"
                );
            }
        }
        assert_eq!(approved, 1, "round {round}");
        let holds = count(
            &app,
            "orders WHERE subscriber_id = $1 AND held_at IS NOT NULL",
            &[&(subscriber as i32)],
        )
        .await;
        assert_eq!(holds, 3, "round {round}");
        let refused = count(
            &app,
            "pre_checkout_decisions
             WHERE telegram_user_id = $1 AND reason = 'hold_limited'",
            &[&user],
        )
        .await;
        assert_eq!(refused, 3, "round {round}");
    }
}

#[tokio::test]
async fn a_card_link_is_open_no_longer_than_a_hold_and_a_later_payment_is_judged_late() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    // Without a seat limit: the page is open no longer than a hold would be.
    let open = channel(&app, -100_500_008, json!({"title": "Open"})).await;
    send(&app, &button_update(&person(7901), &format!("b:{open}"))).await;
    run(&app).await;
    let timeout = order_timeout_sent_to(&fake, 7901);
    assert!(
        (HOLD_SECS - 10..=HOLD_SECS).contains(&timeout),
        "orderTimeout {timeout}"
    );
    assert!(
        messages_to(&fake, 7901)[0].contains("The payment page is open for 4 minutes"),
        "{:?}",
        messages_to(&fake, 7901)
    );
    // Within that time a press reuses the order; after it, a new one is made.
    let (first, _, _) = orders_of(&app, 7901, open).await[0].clone();
    assert_answer(
        &send(&app, &button_update(&person(7901), &format!("b:{open}"))).await,
        ALREADY_SENT,
    );
    age_order(&app, first, HOLD_SECS).await;
    assert_answer(
        &send(&app, &button_update(&person(7901), &format!("b:{open}"))).await,
        ON_ITS_WAY,
    );

    // With a seat limit: at most what is left of the hold. WayForPay does not sign
    // orderTimeout, so a payment after the hold is judged as any late payment.
    let limited = channel(&app, -100_500_009, json!({"title": "One", "seat_limit": 1})).await;
    send(&app, &button_update(&person(7902), &format!("b:{limited}"))).await;
    let (order_id, reference, _) = orders_of(&app, 7902, limited).await[0].clone();
    // Half of the hold is gone by the time the worker sends the link.
    app.db()
        .await
        .execute(
            "UPDATE orders SET hold_until = statement_timestamp() + interval '150 seconds'
             WHERE id = $1",
            &[&order_id],
        )
        .await
        .unwrap();
    run(&app).await;
    let timeout = order_timeout_sent_to(&fake, 7902);
    assert!((140..=150).contains(&timeout), "orderTimeout {timeout}");
    expire_hold(&app, order_id, 1).await;
    let body = wayforpay_callback(&reference, "199.00", "UAH", "Approved");
    assert_wayforpay_accept(&app.post_wayforpay(&body).await.expect(200), &reference);
    assert_eq!(
        payment(&app, &reference).await,
        PaymentRow {
            outcome: "needs_review".into(),
            reason: Some("hold_expired".into()),
            renewal: false
        }
    );
    assert!(membership_of(&app, 7902, limited).await.is_none());
    run(&app).await;
    assert!(
        messages_to(&fake, 7902)
            .iter()
            .any(|m| m.contains("We will review it and get back to you")),
        "{:?}",
        messages_to(&fake, 7902)
    );
}
