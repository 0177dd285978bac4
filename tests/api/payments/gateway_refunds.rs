//! Refunds at the gateway (API.md "Card payments reconciled with the gateway"): a signed
//! WayForPay callback `Refunded` or `Voided` for an applied payment marks it `refunded`
//! (`refunded_at_gateway`) and shortens every membership it extended by what it bought — a
//! lifetime one ends now, one whose new expiry is past is `expired` and its member removed —
//! once, however often (and however concurrently) it is reported; a lifetime purchase gives
//! back the time earlier payments bought, and a refund never revives a membership staff ended.
//! Every signed refund callback is acknowledged, whatever it finds.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::{
    catalog::bundles::{insert_plan, order_plan},
    support::{
        bodies::{EventBody, ListBody, PaymentBody, body_of},
        effects::{app_with, effects_of, run, settle},
        fake_bot::FakeBot,
        helpers::{
            TestApp, WAYFORPAY_KEY, assert_wayforpay_accept, db_now, id, reference,
            wayforpay_callback, wayforpay_callback_signed,
        },
        race::race,
    },
};

/// Pays `order` (199 UAH unless `amount` says otherwise) with a signed `Approved` callback.
async fn pay(app: &TestApp, order: &Value, amount: &str) {
    let r = reference(order);
    let ack = app
        .post_wayforpay(&wayforpay_callback(&r, amount, "UAH", "Approved"))
        .await
        .expect(200);
    assert_wayforpay_accept(&ack, &r);
}

/// Reports the payment of `reference` as `status` (`Refunded`/`Voided`) at the gateway and
/// checks the signed acknowledgement.
async fn report(app: &TestApp, reference: &str, amount: &str, status: &str) {
    let ack = app
        .post_wayforpay(&wayforpay_callback(reference, amount, "UAH", status))
        .await
        .expect(200);
    assert_wayforpay_accept(&ack, reference);
}

/// The membership of (subscriber, channel): (id, status, expires_at; `None` for infinity).
async fn membership(
    app: &TestApp,
    subscriber: i64,
    channel: i64,
) -> (i64, String, Option<DateTime<Utc>>) {
    let row = app
        .db()
        .await
        .query_one(
            "SELECT id, status, CASE WHEN expires_at = 'infinity' THEN NULL ELSE expires_at END
             FROM memberships WHERE subscriber_id = $1 AND channel_id = $2",
            &[&(subscriber as i32), &(channel as i32)],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// The payment of `order`, as `GET /api/payments` shows it.
async fn payment_of(app: &TestApp, order: &Value) -> PaymentBody {
    let list: ListBody<PaymentBody> = body_of(
        &app.get(&format!("/api/payments?order_id={}", id(order)))
            .await
            .expect(200),
    );
    assert_eq!(list.items.len(), 1, "one payment of the order");
    list.items.into_iter().next().unwrap()
}

/// The history of membership `m`, oldest first.
async fn events(app: &TestApp, m: i64) -> Vec<EventBody> {
    let list: ListBody<EventBody> = body_of(
        &app.get(&format!("/api/memberships/{m}/events"))
            .await
            .expect(200),
    );
    list.items
}

/// A staff grant of `days` to (subscriber, channel).
async fn grant(app: &TestApp, subscriber: i64, channel: i64, days: i64) {
    let r = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": subscriber, "channel_id": channel, "days": days}),
        )
        .await;
    assert!(r.status.is_success(), "grant: {}", r.status);
}

fn at(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

#[tokio::test]
async fn a_refunded_purchase_puts_the_expiry_back_and_the_payment_shows_why() {
    let app = TestApp::spawn().await;
    let s = id(&app.create_subscriber(9_600_001).await);
    let c = id(&app.create_channel(-9_600_001, json!({})).await);
    grant(&app, s, c, 10).await;
    let (m, _, held) = membership(&app, s, c).await;
    let held = held.unwrap();
    let o = app.create_order(s, c).await;
    pay(&app, &o, "199").await;
    let (_, _, paid) = membership(&app, s, c).await;
    assert_eq!(paid.unwrap(), held + Duration::days(30));
    let paid_payment = payment_of(&app, &o).await;
    assert_eq!(paid_payment.outcome, "applied");

    report(&app, &reference(&o), "199", "Refunded").await;

    let (_, status, expires) = membership(&app, s, c).await;
    assert_eq!(status, "active", "the staff grant's days are still ahead");
    assert_eq!(
        expires.unwrap(),
        held,
        "back where it was before the payment"
    );
    let p = payment_of(&app, &o).await;
    assert_eq!(p.outcome, "refunded");
    assert_eq!(p.reason.as_deref(), Some("refunded_at_gateway"));
    let refunded: ListBody<PaymentBody> =
        body_of(&app.get("/api/payments?outcome=refunded").await.expect(200));
    assert_eq!(refunded.items.len(), 1);
    let history = events(&app, m).await;
    let last = history.last().unwrap();
    assert_eq!(last.cause, "refund");
    assert_eq!(last.payment_id, Some(p.id));
    assert_eq!(
        (last.from_status.as_deref(), last.to_status.as_str()),
        (Some("active"), "active")
    );
    assert_eq!(
        at(last.expires_at_before.as_deref().unwrap()),
        paid.unwrap()
    );
    assert_eq!(at(&last.expires_at_after), held);
    assert_eq!(history.len(), 3, "grant, payment, refund");
    assert_eq!(
        app.count("effects WHERE kind = 'revoke'").await,
        0,
        "nobody is removed while the term still runs"
    );
}

#[tokio::test]
async fn refunding_the_first_of_two_purchases_removes_only_its_30_days() {
    let app = TestApp::spawn().await;
    let s = id(&app.create_subscriber(9_600_002).await);
    let c = id(&app.create_channel(-9_600_002, json!({})).await);
    let first = app.create_order(s, c).await;
    pay(&app, &first, "199").await;
    let (m, _, one) = membership(&app, s, c).await;
    let second = app.create_order(s, c).await;
    pay(&app, &second, "199").await;
    let (_, _, two) = membership(&app, s, c).await;
    assert_eq!(two.unwrap(), one.unwrap() + Duration::days(30));

    report(&app, &reference(&first), "199", "Refunded").await;

    let (_, status, expires) = membership(&app, s, c).await;
    assert_eq!(status, "active");
    assert_eq!(
        expires.unwrap(),
        one.unwrap(),
        "the renewal's 30 days are kept: only the first payment's are gone"
    );
    assert_eq!(payment_of(&app, &first).await.outcome, "refunded");
    assert_eq!(payment_of(&app, &second).await.outcome, "applied");
    assert_eq!(events(&app, m).await.last().unwrap().cause, "refund");
}

#[tokio::test]
async fn a_refund_that_ends_the_term_expires_it_and_removes_the_member() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_009_600_003, 9_600_003);
    let s = id(&app.create_subscriber(user).await);
    let c = id(&app.create_channel(chat, json!({})).await);
    let o = app.create_order(s, c).await;
    pay(&app, &o, "199").await;
    run(&app).await; // the grant
    settle(&app).await;
    fake.add_member(chat, user);
    fake.clear_calls();
    let before = db_now(&app).await;

    report(&app, &reference(&o), "199", "Refunded").await;

    let (m, status, expires) = membership(&app, s, c).await;
    assert_eq!(
        status, "expired",
        "the whole term was the refunded payment's"
    );
    assert!(expires.unwrap() <= before, "its expiry is back in the past");
    let p = payment_of(&app, &o).await;
    let last = events(&app, m).await.pop().unwrap();
    assert_eq!(
        (
            last.cause.as_str(),
            last.payment_id,
            last.to_status.as_str()
        ),
        ("refund", Some(p.id), "expired")
    );
    let revokes = effects_of(&app, "revoke").await;
    assert_eq!(revokes.len(), 1, "{revokes:?}");
    assert_eq!(revokes[0]["membership_id"].as_i64(), Some(m));
    assert_eq!(revokes[0]["payment_id"].as_i64(), Some(p.id));

    run(&app).await;
    assert!(
        !fake.members_of(chat).contains(&user),
        "removed from the chat: {:?}",
        fake.methods()
    );
    assert_eq!(effects_of(&app, "revoke").await[0]["status"], "done");
    // Reported again: nothing more happens.
    report(&app, &reference(&o), "199", "Refunded").await;
    assert_eq!(effects_of(&app, "revoke").await.len(), 1);
    assert_eq!(
        app.count("membership_events WHERE cause = 'refund'").await,
        1
    );
}

#[tokio::test]
async fn a_refunded_lifetime_purchase_ends_now() {
    let app = TestApp::spawn().await;
    let s = id(&app.create_subscriber(9_600_004).await);
    let c = id(&app.create_channel(-9_600_004, json!({})).await);
    let plan = insert_plan(&app, "paid", 50_000, "UAH", None, &[c]).await;
    let o = order_plan(&app, s, plan).await;
    pay(&app, &o, "500").await;
    let (m, status, expires) = membership(&app, s, c).await;
    assert_eq!((status.as_str(), expires), ("active", None), "lifetime");
    let before = db_now(&app).await;

    report(&app, &reference(&o), "500", "Refunded").await;

    let after = db_now(&app).await;
    let (_, status, expires) = membership(&app, s, c).await;
    assert_eq!(status, "expired");
    let expires = expires.expect("no longer infinity");
    assert!(before <= expires && expires <= after, "ends now: {expires}");
    let last = events(&app, m).await.pop().unwrap();
    assert_eq!(last.expires_at_before.as_deref(), Some("infinity"));
    assert_eq!(last.cause, "refund");
    assert_eq!(app.count("effects WHERE kind = 'revoke'").await, 1);
    assert_eq!(
        payment_of(&app, &o).await.reason.as_deref(),
        Some("refunded_at_gateway")
    );
}

#[tokio::test]
async fn a_refunded_bundle_shortens_every_channel_and_voided_counts_as_refunded() {
    let app = TestApp::spawn().await;
    let s = id(&app.create_subscriber(9_600_005).await);
    let a = id(&app.create_channel(-9_600_005, json!({})).await);
    let b = id(&app.create_channel(-9_600_006, json!({})).await);
    grant(&app, s, a, 10).await;
    grant(&app, s, b, 20).await;
    let (ma, _, a_held) = membership(&app, s, a).await;
    let (mb, _, b_held) = membership(&app, s, b).await;
    let plan = insert_plan(&app, "paid", 30_000, "UAH", Some(30), &[b, a]).await;
    let o = order_plan(&app, s, plan).await;
    pay(&app, &o, "300").await;
    assert_eq!(
        membership(&app, s, a).await.2.unwrap(),
        a_held.unwrap() + Duration::days(30)
    );
    assert_eq!(
        membership(&app, s, b).await.2.unwrap(),
        b_held.unwrap() + Duration::days(30)
    );

    report(&app, &reference(&o), "300", "Voided").await;

    for (m, channel, held) in [(ma, a, a_held), (mb, b, b_held)] {
        let (_, status, expires) = membership(&app, s, channel).await;
        assert_eq!(
            (status.as_str(), expires),
            ("active", held),
            "channel {channel}"
        );
        assert_eq!(events(&app, m).await.last().unwrap().cause, "refund");
    }
    let p = payment_of(&app, &o).await;
    assert_eq!(
        (p.outcome.as_str(), p.reason.as_deref()),
        ("refunded", Some("refunded_at_gateway"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeated_and_concurrent_refund_callbacks_take_back_once() {
    let app = Arc::new(TestApp::spawn().await);
    let s = id(&app.create_subscriber(9_600_007).await);
    let c = id(&app.create_channel(-9_600_007, json!({})).await);
    grant(&app, s, c, 400).await;
    let (m, _, _) = membership(&app, s, c).await;
    for round in 0..6 {
        let (_, _, held) = membership(&app, s, c).await;
        let o = app.create_order(s, c).await;
        pay(&app, &o, "199").await;
        let r = reference(&o);
        for answer in race(8, |i| {
            let app = app.clone();
            let status = if i % 2 == 0 { "Refunded" } else { "Voided" };
            let body = wayforpay_callback(&r, "199", "UAH", status);
            async move { app.post_wayforpay(&body).await }
        })
        .await
        {
            assert_wayforpay_accept(&answer.expect(200), &r);
        }
        // And once more after they all committed.
        report(&app, &r, "199", "Refunded").await;
        let (_, status, expires) = membership(&app, s, c).await;
        assert_eq!(status, "active");
        assert_eq!(expires, held, "round {round}: 30 days taken back once");
        let p = payment_of(&app, &o).await;
        assert_eq!(p.outcome, "refunded", "round {round}");
        assert_eq!(
            app.count(&format!(
                "membership_events WHERE cause = 'refund' AND payment_id = {}",
                p.id
            ))
            .await,
            1,
            "round {round}: one refund event"
        );
    }
    assert_eq!(events(&app, m).await.len(), 1 + 6 * 2);
}

#[tokio::test]
async fn refunds_of_unknown_unapplied_or_ended_payments_are_acknowledged_and_change_nothing() {
    let app = TestApp::spawn().await;
    let s = id(&app.create_subscriber(9_600_008).await);
    let c = id(&app.create_channel(-9_600_008, json!({})).await);

    // Unknown: no payment (nor order) of that reference. The refund is recorded as the payment
    // it refunds, so that payment grants nothing should it come (tests/api/payments/refunds_before_payments.rs).
    report(&app, "ord_never_paid", "199", "Refunded").await;
    let recorded: ListBody<PaymentBody> =
        body_of(&app.get("/api/payments?outcome=refunded").await.expect(200));
    let early = &recorded.items[0];
    assert_eq!(
        (
            early.external_id.as_str(),
            early.reason.as_deref(),
            early.order_id
        ),
        ("ord_never_paid", Some("refunded_before_payment"), None)
    );

    // Not applied: kept for review (the amount did not match).
    let wrong = app.create_order(s, c).await;
    pay(&app, &wrong, "1").await;
    assert_eq!(payment_of(&app, &wrong).await.outcome, "needs_review");
    report(&app, &reference(&wrong), "1", "Voided").await;
    let p = payment_of(&app, &wrong).await;
    assert_eq!(
        (p.outcome.as_str(), p.reason.as_deref()),
        ("needs_review", Some("amount_mismatch"))
    );

    // Applied, but its membership was ended by staff since: the payment is refunded, the
    // membership left as it is.
    let o = app.create_order(s, c).await;
    pay(&app, &o, "199").await;
    let (m, _, _) = membership(&app, s, c).await;
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);
    let ended = membership(&app, s, c).await;
    let effects = app.count("effects").await;
    report(&app, &reference(&o), "199", "Refunded").await;
    assert_eq!(membership(&app, s, c).await, ended);
    assert_eq!(payment_of(&app, &o).await.outcome, "refunded");
    assert_eq!(
        app.count("membership_events WHERE cause = 'refund'").await,
        0
    );
    assert_eq!(app.count("effects").await, effects);

    // Deleted: nothing to shorten, the payment is still refunded.
    let s2 = id(&app.create_subscriber(9_600_009).await);
    let o2 = app.create_order(s2, c).await;
    pay(&app, &o2, "199").await;
    let (m2, _, _) = membership(&app, s2, c).await;
    app.delete(&format!("/api/memberships/{m2}"))
        .await
        .expect(204);
    report(&app, &reference(&o2), "199", "Refunded").await;
    assert_eq!(payment_of(&app, &o2).await.outcome, "refunded");
    assert_eq!(app.count("memberships").await, 1);
    assert_eq!(
        app.count("membership_events WHERE cause = 'refund'").await,
        0
    );

    // A refund callback with a bad signature is refused and changes nothing.
    let o3 = app.create_order(s2, c).await;
    pay(&app, &o3, "199").await;
    let forged = wayforpay_callback_signed(
        "not-the-key",
        crate::support::helpers::WAYFORPAY_ACCOUNT,
        &reference(&o3),
        "199",
        "UAH",
        "Refunded",
    );
    assert_ne!(WAYFORPAY_KEY, "not-the-key");
    app.post_wayforpay(&forged).await.expect(401);
    assert_eq!(payment_of(&app, &o3).await.outcome, "applied");
}

#[tokio::test]
async fn refunding_a_lifetime_purchase_gives_back_the_time_an_earlier_payment_bought() {
    let app = TestApp::spawn().await;
    let s = id(&app.create_subscriber(9_600_010).await);
    let c = id(&app.create_channel(-9_600_010, json!({})).await);
    let month = app.create_order(s, c).await;
    pay(&app, &month, "199").await;
    let (m, _, bought) = membership(&app, s, c).await;
    let bought = bought.expect("30 days");
    let plan = insert_plan(&app, "paid", 50_000, "UAH", None, &[c]).await;
    let life = order_plan(&app, s, plan).await;
    pay(&app, &life, "500").await;
    assert_eq!(membership(&app, s, c).await.2, None, "lifetime");

    report(&app, &reference(&life), "500", "Refunded").await;

    let (_, status, expires) = membership(&app, s, c).await;
    assert_eq!(
        (status.as_str(), expires),
        ("active", Some(bought)),
        "the 30-day payment is still applied: its term is back"
    );
    let last = events(&app, m).await.pop().unwrap();
    assert_eq!(
        (last.cause.as_str(), last.expires_at_before.as_deref()),
        ("refund", Some("infinity"))
    );
    assert_eq!(at(&last.expires_at_after), bought);
    assert_eq!(
        app.count("effects WHERE kind = 'revoke'").await,
        0,
        "nobody is removed while the 30 days run"
    );
    assert_eq!(payment_of(&app, &month).await.outcome, "applied");
    assert_eq!(payment_of(&app, &life).await.outcome, "refunded");
}

#[tokio::test]
async fn a_refund_never_revives_a_membership_staff_ended() {
    let app = TestApp::spawn().await;
    let s = id(&app.create_subscriber(9_600_011).await);
    let c = id(&app.create_channel(-9_600_011, json!({})).await);
    grant(&app, s, c, 10).await;
    let (m, _, held) = membership(&app, s, c).await;
    // Staff end it, its expiry still ten days ahead.
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);
    let o = app.create_order(s, c).await;
    pay(&app, &o, "199").await;
    assert_eq!(
        membership(&app, s, c).await.1,
        "active",
        "the payment revives it"
    );
    let revokes = app.count("effects WHERE kind = 'revoke'").await;

    report(&app, &reference(&o), "199", "Refunded").await;

    let (_, status, expires) = membership(&app, s, c).await;
    assert_eq!(
        (status.as_str(), expires),
        ("expired", held),
        "back to what staff left: ended"
    );
    let last = events(&app, m).await.pop().unwrap();
    assert_eq!(
        (
            last.cause.as_str(),
            last.from_status.as_deref(),
            last.to_status.as_str()
        ),
        ("refund", Some("active"), "expired")
    );
    assert_eq!(
        app.count("effects WHERE kind = 'revoke'").await,
        revokes + 1,
        "the member the payment let in is removed"
    );

    // A later purchase stands on its own: refunding the earlier one keeps it active.
    let s2 = id(&app.create_subscriber(9_600_012).await);
    grant(&app, s2, c, 10).await;
    let (m2, _, _) = membership(&app, s2, c).await;
    app.patch(
        &format!("/api/memberships/{m2}"),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);
    let revived = app.create_order(s2, c).await;
    pay(&app, &revived, "199").await;
    let renewal = app.create_order(s2, c).await;
    pay(&app, &renewal, "199").await;
    let (_, _, both) = membership(&app, s2, c).await;
    report(&app, &reference(&revived), "199", "Refunded").await;
    let (_, status, expires) = membership(&app, s2, c).await;
    assert_eq!(status, "active", "the renewal was bought while it was live");
    assert_eq!(expires.unwrap(), both.unwrap() - Duration::days(30));
}
