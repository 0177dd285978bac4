//! The commission ledger in the payment core (API.md "Referrals and affiliates"): an applied
//! payment of a referred buyer writes one line in its own transaction whatever door and however
//! often it is delivered; a refund at the gateway reverses it once (an unpaid line is simply
//! `reversed`, a paid one gets a negative `reversal`); a buyer-referrer's reward days are owed
//! in the payment's transaction under the month's cap, granted by the worker and taken back
//! after a refund. The program and attributions are set with SQL here (their staff API and the
//! bot's clicks have tests of their own).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::{
    effects::{app_with, run_until_done},
    fake_bot::FakeBot,
    helpers::{TestApp, assert_wayforpay_accept, id, reference, wayforpay_callback},
    race::race,
};

/// Switches the program on: 20 % of first purchases, 10 % of renewals for 6 months, 14 days'
/// hold, and `extra` (SQL assignments) on top.
pub(crate) async fn program_on(app: &TestApp, extra: &str) {
    let sep = if extra.is_empty() { "" } else { ", " };
    app.db()
        .await
        .execute(
            &format!(
                "UPDATE referral_program SET enabled = true, first_percent = 20,
                 renewal_percent = 10, renewal_months = 6, hold_days = 14{sep}{extra}"
            ),
            &[],
        )
        .await
        .unwrap();
}

/// An affiliate (a buyer's when `subscriber` is given); returns its id.
pub(crate) async fn affiliate(app: &TestApp, code: &str, subscriber: Option<i64>) -> i32 {
    app.db()
        .await
        .query_one(
            "INSERT INTO affiliates (name, code, subscriber_id) VALUES ($1, $1, $2) RETURNING id",
            &[&code, &subscriber.map(|s| s as i32)],
        )
        .await
        .unwrap()
        .get(0)
}

/// Attributes `subscriber` to `affiliate` now.
pub(crate) async fn attribute(app: &TestApp, subscriber: i64, affiliate: i32) {
    app.db()
        .await
        .execute(
            "INSERT INTO referral_attributions (subscriber_id, affiliate_id) VALUES ($1, $2)",
            &[&(subscriber as i32), &affiliate],
        )
        .await
        .unwrap();
}

/// Every line: (payment, kind, amount, status), by id.
async fn lines(app: &TestApp) -> Vec<(i64, String, i64, String)> {
    app.db()
        .await
        .query(
            "SELECT payment_id, kind, amount_minor, status FROM commission_lines ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect()
}

async fn payment_id(app: &TestApp, order: &Value) -> i64 {
    app.db()
        .await
        .query_one("SELECT id FROM payments WHERE order_id = $1", &[&id(order)])
        .await
        .unwrap()
        .get(0)
}

/// Pays `order` (199 UAH) with a signed WayForPay `Approved` callback.
async fn pay_wayforpay(app: &TestApp, order: &Value) {
    let r = reference(order);
    let ack = app
        .post_wayforpay(&wayforpay_callback(&r, "199", "UAH", "Approved"))
        .await
        .expect(200);
    assert_wayforpay_accept(&ack, &r);
}

async fn refund_wayforpay(app: &TestApp, order: &Value) {
    let r = reference(order);
    let ack = app
        .post_wayforpay(&wayforpay_callback(&r, "199", "UAH", "Refunded"))
        .await
        .expect(200);
    assert_wayforpay_accept(&ack, &r);
}

#[tokio::test]
async fn a_referred_payment_delivered_many_times_at_once_earns_one_line() {
    let app = Arc::new(TestApp::spawn().await);
    program_on(&app, "").await;
    let a = affiliate(&app, "PARTNER", None).await;
    let c = id(&app.create_channel(-9_710_001, json!({})).await);
    for round in 0..3 {
        let s = id(&app.create_subscriber(9_710_010 + round).await);
        attribute(&app, s, a).await;
        let order = app.create_order(s, c).await;
        let answers = race(6, |_| {
            let (app, order) = (app.clone(), order.clone());
            async move { app.pay_order(&order, &format!("ref_{round}")).await.status }
        })
        .await;
        assert!(answers.iter().all(|s| s.is_success()), "{answers:?}");
    }
    let all = lines(&app).await;
    assert_eq!(all.len(), 3, "one line per payment: {all:?}");
    let amount = app
        .db()
        .await
        .query_one(
            "SELECT amount_minor FROM payments WHERE external_id = 'ref_0'",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    for (_, kind, minor, status) in &all {
        assert_eq!(kind, "first");
        assert_eq!(*minor, amount * 20 / 100);
        assert_eq!(status, "pending");
    }
}

#[tokio::test]
async fn an_unreferred_payment_earns_nothing_and_a_renewal_earns_the_renewal_percent() {
    let app = TestApp::spawn().await;
    program_on(&app, "").await;
    let a = affiliate(&app, "PARTNER", None).await;
    let c = id(&app.create_channel(-9_710_002, json!({})).await);
    let stranger = id(&app.create_subscriber(9_710_020).await);
    let o = app.create_order(stranger, c).await;
    app.pay_order(&o, "plain_1").await.expect(200);
    assert!(lines(&app).await.is_empty(), "nobody referred this buyer");

    let s = id(&app.create_subscriber(9_710_021).await);
    attribute(&app, s, a).await;
    let first = app.create_order(s, c).await;
    pay_wayforpay(&app, &first).await;
    let second = app.create_order(s, c).await;
    pay_wayforpay(&app, &second).await;
    let all = lines(&app).await;
    assert_eq!(
        all,
        vec![
            (
                payment_id(&app, &first).await,
                "first".into(),
                3980,
                "pending".into()
            ),
            (
                payment_id(&app, &second).await,
                "renewal".into(),
                1990,
                "pending".into()
            ),
        ]
    );
}

#[tokio::test]
async fn a_buyer_who_paid_before_the_click_is_not_a_referral_for_that_channel() {
    let app = TestApp::spawn().await;
    program_on(&app, "").await;
    let a = affiliate(&app, "PARTNER", None).await;
    let c = id(&app.create_channel(-9_710_003, json!({})).await);
    let s = id(&app.create_subscriber(9_710_030).await);
    let before = app.create_order(s, c).await;
    pay_wayforpay(&app, &before).await;
    attribute(&app, s, a).await;
    let after = app.create_order(s, c).await;
    pay_wayforpay(&app, &after).await;
    assert!(lines(&app).await.is_empty());
}

#[tokio::test]
async fn a_refund_reverses_an_unpaid_line_once_and_a_paid_one_with_a_negative_line() {
    let app = Arc::new(TestApp::spawn().await);
    program_on(&app, "").await;
    let a = affiliate(&app, "PARTNER", None).await;
    let c = id(&app.create_channel(-9_710_004, json!({})).await);
    let s = id(&app.create_subscriber(9_710_040).await);
    attribute(&app, s, a).await;
    let unpaid = app.create_order(s, c).await;
    pay_wayforpay(&app, &unpaid).await;
    let paid = app.create_order(s, c).await;
    pay_wayforpay(&app, &paid).await;
    // The renewal's line was paid out.
    let db = app.db().await;
    let payout: i64 = db
        .query_one(
            "INSERT INTO payouts (affiliate_id, currency, amount_minor, lines)
             VALUES ($1, 'UAH', 1990, 1) RETURNING id",
            &[&a],
        )
        .await
        .unwrap()
        .get(0);
    db.execute(
        "UPDATE commission_lines SET status = 'paid', payout_id = $1 WHERE kind = 'renewal'",
        &[&payout],
    )
    .await
    .unwrap();

    for _ in 0..2 {
        race(3, |_| {
            let (app, unpaid, paid) = (app.clone(), unpaid.clone(), paid.clone());
            async move {
                refund_wayforpay(&app, &unpaid).await;
                refund_wayforpay(&app, &paid).await;
            }
        })
        .await;
    }
    let (first, renewal) = (
        payment_id(&app, &unpaid).await,
        payment_id(&app, &paid).await,
    );
    assert_eq!(
        lines(&app).await,
        vec![
            (first, "first".into(), 3980, "reversed".into()),
            (renewal, "renewal".into(), 1990, "paid".into()),
            (renewal, "reversal".into(), -1990, "pending".into()),
        ]
    );
}

/// The referrer's membership of channel `c`: (expires_at as Unix seconds, status).
async fn referrer_membership(app: &TestApp, s: i64, c: i64) -> Option<(i64, String)> {
    app.db()
        .await
        .query_opt(
            "SELECT extract(epoch FROM expires_at)::bigint, status FROM memberships
             WHERE subscriber_id = $1 AND channel_id = $2",
            &[&(s as i32), &(c as i32)],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

#[tokio::test]
async fn a_buyer_referrer_earns_days_up_to_the_monthly_cap_and_loses_them_with_the_refund() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    program_on(
        &app,
        "buyer_reward_days = 7, max_reward_days_per_month = 10",
    )
    .await;
    let c = id(&app.create_channel(-1_009_710_005, json!({})).await);
    let referrer = id(&app.create_subscriber(9_710_050).await);
    let a = affiliate(&app, "FRIEND", Some(referrer)).await;
    let mut orders = Vec::new();
    for n in 0..3 {
        let s = id(&app.create_subscriber(9_710_051 + n).await);
        attribute(&app, s, a).await;
        orders.push(app.create_order(s, c).await);
    }
    race(3, |i| {
        let (app, order) = (app.clone(), orders[i].clone());
        async move { pay_wayforpay(&app, &order).await }
    })
    .await;
    let owed: Vec<i32> = app
        .db()
        .await
        .query("SELECT days FROM referral_rewards ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(owed, vec![7, 3], "the cap of 10 days a month holds at once");
    assert!(
        lines(&app).await.is_empty(),
        "a buyer-referrer earns days, not money"
    );

    run_until_done(&app).await;
    let (granted, status) = referrer_membership(&app, referrer, c).await.unwrap();
    assert_eq!(status, "active");
    let now = app
        .db()
        .await
        .query_one("SELECT extract(epoch FROM now())::bigint", &[])
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert!((granted - now - 10 * 86_400).abs() < 60, "10 days granted");
    assert_eq!(
        app.count("membership_events WHERE cause = 'referral'")
            .await,
        2
    );
    // The referrer is told why, in words of their own: the first reward is a grant with the
    // channel's link, the second one extends it.
    let told: Vec<String> = fake
        .delivered_messages()
        .iter()
        .filter(|m| m.params["chat_id"] == 9_710_050)
        .map(|m| m.params["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(told.len(), 2, "{told:?}");
    assert!(
        told.iter()
            .all(|t| t.starts_with("A friend you invited bought access")),
        "{told:?}"
    );

    // The 7-day purchase is refunded (twice): its days go, once.
    let seven: i64 = app
        .db()
        .await
        .query_one(
            "SELECT p.order_id FROM referral_rewards r JOIN payments p ON p.id = r.payment_id
             WHERE r.days = 7",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let order = orders.iter().find(|o| id(o) == seven).unwrap();
    refund_wayforpay(&app, order).await;
    refund_wayforpay(&app, order).await;
    settle_buyer_effects(&app).await;
    run_until_done(&app).await;
    let (after, status) = referrer_membership(&app, referrer, c).await.unwrap();
    assert_eq!(status, "active");
    assert_eq!(granted - after, 7 * 86_400, "exactly the 7 days taken back");
    assert_eq!(
        app.count("membership_events WHERE cause = 'referral_back'")
            .await,
        1
    );
}

/// The refunded buyer's own revoke is not under test here.
async fn settle_buyer_effects(app: &TestApp) {
    app.db()
        .await
        .execute(
            "UPDATE effects SET status = 'done', done_at = now()
             WHERE status = 'pending' AND kind <> 'referral_reward'",
            &[],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn reward_days_refunded_before_they_were_granted_are_never_granted() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    program_on(&app, "buyer_reward_days = 7").await;
    let c = id(&app.create_channel(-1_009_710_006, json!({})).await);
    let referrer = id(&app.create_subscriber(9_710_060).await);
    let a = affiliate(&app, "FRIEND", Some(referrer)).await;
    let s = id(&app.create_subscriber(9_710_061).await);
    attribute(&app, s, a).await;
    let order = app.create_order(s, c).await;
    pay_wayforpay(&app, &order).await;
    refund_wayforpay(&app, &order).await;
    settle_buyer_effects(&app).await;
    run_until_done(&app).await;
    assert_eq!(referrer_membership(&app, referrer, c).await, None);
    assert_eq!(
        app.count("effects WHERE kind = 'referral_reward' AND status = 'done'")
            .await,
        1,
        "the grant's effect found the reward reversed and did nothing"
    );
}

/// The outbound events of `kind`, their `data`, in order.
async fn events(app: &TestApp, kind: &str) -> Vec<Value> {
    app.db()
        .await
        .query(
            "SELECT body::jsonb -> 'data' FROM webhook_events WHERE type = $1 ORDER BY id",
            &[&kind],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn attributions_lines_and_their_reversal_are_outbound_events_once() {
    let app = TestApp::spawn().await;
    app.db()
        .await
        .execute(
            "INSERT INTO webhook_endpoints (url, event_types, secret)
             VALUES ('https://1.1.1.1/hook', ARRAY['referral.attributed', 'commission.created',
                     'commission.reversed', 'payout.recorded'], 'whsec_dGVzdA==')",
            &[],
        )
        .await
        .unwrap();
    program_on(&app, "").await;
    let a = affiliate(&app, "PARTNER", None).await;
    let c = id(&app.create_channel(-9_710_007, json!({})).await);
    let s = id(&app.create_subscriber(9_710_070).await);
    attribute(&app, s, a).await;
    let order = app.create_order(s, c).await;
    pay_wayforpay(&app, &order).await;
    pay_wayforpay(&app, &order).await;
    refund_wayforpay(&app, &order).await;
    refund_wayforpay(&app, &order).await;

    let attributed = events(&app, "referral.attributed").await;
    assert_eq!(attributed.len(), 1);
    assert_eq!(attributed[0]["subscriber_id"], s);
    assert_eq!(attributed[0]["affiliate_id"], a);
    let created = events(&app, "commission.created").await;
    assert_eq!(created.len(), 1, "{created:?}");
    let payment = payment_id(&app, &order).await;
    assert_eq!(created[0]["payment_id"], payment);
    assert_eq!(created[0]["kind"], "first");
    assert_eq!(created[0]["amount_minor"], 3980);
    assert_eq!(created[0]["status"], "pending");
    let reversed = events(&app, "commission.reversed").await;
    assert_eq!(reversed.len(), 1, "{reversed:?}");
    assert_eq!(reversed[0]["id"], created[0]["id"]);
    assert_eq!(reversed[0]["status"], "reversed");
}
