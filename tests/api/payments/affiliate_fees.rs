//! Telegram's affiliate fee on a Stars payment: read by the Stars reconcile from the charge's
//! `StarTransaction` (`source.affiliate.amount`), recorded once on the payment, shown by the
//! staff API, and carried into the revenue statistics — also when it arrives after its day was
//! rolled up, for a payment the reconcile itself recovers, and for a payment stored only after
//! the fee was read.

use chrono::{Duration, DurationRound, Utc};
use serde_json::Value;
use subgate::telegram::recovery::{self, ReconcileReport};

use crate::{
    payments::{
        stars_subscriptions::app_with,
        telegram_door::{PRICE, order, pay, stars_channel, subscriber},
    },
    support::{
        bodies::{PaymentBody, payment_detail_of},
        fake_bot::FakeBot,
        helpers::TestApp,
    },
};

async fn reconcile(app: &TestApp) -> ReconcileReport {
    recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap()
}

/// The Stars payment with this charge id, as `GET /api/payments/{id}` shows it.
async fn stars_payment(app: &TestApp, charge_id: &str) -> PaymentBody {
    let id: i64 = app
        .db()
        .await
        .query_one(
            "SELECT id FROM payments WHERE gateway = 'telegram_stars' AND external_id = $1",
            &[&charge_id],
        )
        .await
        .unwrap()
        .get("id");
    payment_detail_of(&app.get(&format!("/api/payments/{id}")).await.expect(200)).0
}

/// A buyer with a pending order of a new Stars channel: (Telegram user id, order reference).
async fn buyer(app: &TestApp, user: i64, chat: i64) -> String {
    let c = stars_channel(app, chat, None).await;
    let s = subscriber(app, user).await;
    order(app, s, c).await.1
}

/// The XTR revenue of the UTC day starting at `day`:
/// (gross, refunded, net, affiliate fees, net after fees, payments).
async fn xtr_revenue(app: &TestApp, day: chrono::DateTime<Utc>) -> [i64; 6] {
    let v = app
        .get(&format!(
            "/api/stats/revenue?from={}&to={}",
            day.format("%Y-%m-%d"),
            (day + Duration::days(1)).format("%Y-%m-%d")
        ))
        .await
        .expect(200);
    let items = v["items"].as_array().unwrap();
    let r: &Value = items
        .iter()
        .find(|r| r["currency"] == "XTR")
        .unwrap_or_else(|| panic!("{v}"));
    [
        "gross_minor",
        "refunded_minor",
        "net_minor",
        "affiliate_fees_minor",
        "net_after_fees_minor",
        "payments",
    ]
    .map(|k| r[k].as_i64().unwrap_or_else(|| panic!("{k} in {r}")))
}

/// Whether the UTC day starting at `day` is rolled up (1) or not (0).
async fn rolled(app: &TestApp, day: chrono::DateTime<Utc>) -> i64 {
    app.db()
        .await
        .query_one(
            "SELECT count(*) AS n FROM stats_rolled_days WHERE day = $1",
            &[&day.date_naive()],
        )
        .await
        .unwrap()
        .get("n")
}

async fn noted_fees(app: &TestApp) -> i64 {
    app.count("star_affiliate_fees").await
}

#[tokio::test]
async fn a_stars_payment_gets_its_affiliate_fee_once_and_the_revenue_shows_it() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let reference = buyer(&app, 7_401, -1_007_400_000_001).await;
    pay(&app, "aff-1", 7_401, &reference).await;
    assert_eq!(stars_payment(&app, "aff-1").await.affiliate_fee_minor, 0);

    // Telegram lists the charge with its affiliate: 200 per mille of 250 Stars is 50.
    fake.add_incoming_payment_with_affiliate("aff-1", 7_401, &reference, PRICE, (50, 200));
    let r = reconcile(&app).await;
    assert_eq!(
        (
            r.affiliate_fees_recorded,
            r.affiliate_fees_waiting,
            r.payments_recovered
        ),
        (1, 0, 0),
        "{r:?}"
    );
    let p = stars_payment(&app, "aff-1").await;
    assert_eq!((p.amount_minor, p.affiliate_fee_minor), (PRICE, 50));
    assert_eq!(p.outcome, "applied");
    assert_eq!(noted_fees(&app).await, 0, "recorded, so no longer noted");

    // The next run reads the same transaction again: nothing changes.
    let r = reconcile(&app).await;
    assert_eq!(r.affiliate_fees_recorded, 0, "{r:?}");
    assert_eq!(stars_payment(&app, "aff-1").await.affiliate_fee_minor, 50);
    assert_eq!(noted_fees(&app).await, 0);
    assert_eq!(app.count("payments").await, 1);
    assert_eq!(app.count("membership_events").await, 1);

    let today = Utc::now().duration_trunc(Duration::days(1)).unwrap();
    assert_eq!(
        xtr_revenue(&app, today).await,
        [PRICE, 0, PRICE, 50, PRICE - 50, 1]
    );
}

#[tokio::test]
async fn a_transaction_without_an_affiliate_changes_nothing() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let reference = buyer(&app, 7_402, -1_007_400_000_002).await;
    pay(&app, "plain-1", 7_402, &reference).await;
    fake.add_incoming_payment("plain-1", 7_402, &reference, PRICE);
    let r = reconcile(&app).await;
    assert_eq!(
        (r.affiliate_fees_recorded, r.affiliate_fees_waiting),
        (0, 0),
        "{r:?}"
    );
    assert_eq!(stars_payment(&app, "plain-1").await.affiliate_fee_minor, 0);
    assert_eq!(noted_fees(&app).await, 0);
    let today = Utc::now().duration_trunc(Duration::days(1)).unwrap();
    assert_eq!(
        xtr_revenue(&app, today).await,
        [PRICE, 0, PRICE, 0, PRICE, 1]
    );
}

#[tokio::test]
async fn a_payment_the_reconcile_recovers_gets_its_fee_in_the_same_run() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let reference = buyer(&app, 7_403, -1_007_400_000_003).await;
    // The update never arrived; Telegram lists the charge with its affiliate.
    fake.add_incoming_payment_with_affiliate("aff-missed", 7_403, &reference, PRICE, (25, 100));
    let r = reconcile(&app).await;
    assert_eq!(
        (
            r.payments_recovered,
            r.affiliate_fees_recorded,
            r.affiliate_fees_waiting
        ),
        (1, 1, 0),
        "{r:?}"
    );
    let p = stars_payment(&app, "aff-missed").await;
    assert_eq!(
        (p.outcome.as_str(), p.amount_minor, p.affiliate_fee_minor),
        ("applied", PRICE, 25)
    );
    let r = reconcile(&app).await;
    assert_eq!(
        (r.payments_recovered, r.affiliate_fees_recorded),
        (0, 0),
        "{r:?}"
    );
    assert_eq!(
        stars_payment(&app, "aff-missed").await.affiliate_fee_minor,
        25
    );
}

#[tokio::test]
async fn a_fee_read_before_its_payment_is_stored_is_recorded_by_a_later_run() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let reference = buyer(&app, 7_404, -1_007_400_000_004).await;
    // An earlier run read the fee, but could not store the payment (its apply failed), and
    // its cursor has moved past the transaction since.
    app.db()
        .await
        .execute(
            "INSERT INTO star_affiliate_fees (charge_id, amount_minor) VALUES ('aff-late', 30)",
            &[],
        )
        .await
        .unwrap();
    let r = reconcile(&app).await;
    assert_eq!(
        (r.affiliate_fees_recorded, r.affiliate_fees_waiting),
        (0, 1),
        "{r:?}"
    );
    assert_eq!(
        noted_fees(&app).await,
        1,
        "kept until its payment is stored"
    );

    // The update arrives at last; the next run records the fee.
    pay(&app, "aff-late", 7_404, &reference).await;
    let r = reconcile(&app).await;
    assert_eq!(
        (r.affiliate_fees_recorded, r.affiliate_fees_waiting),
        (1, 0),
        "{r:?}"
    );
    assert_eq!(
        stars_payment(&app, "aff-late").await.affiliate_fee_minor,
        30
    );
    assert_eq!(noted_fees(&app).await, 0);
}

#[tokio::test]
async fn a_fee_recorded_after_its_day_was_rolled_up_rolls_the_day_again() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let reference = buyer(&app, 7_405, -1_007_400_000_005).await;
    pay(&app, "aff-old", 7_405, &reference).await;
    let db = app.db().await;
    db.execute(
        "UPDATE payments SET paid_at = paid_at - interval '3 days' WHERE external_id = 'aff-old'",
        &[],
    )
    .await
    .unwrap();
    let today = Utc::now().duration_trunc(Duration::days(1)).unwrap();
    let day = today - Duration::days(3);
    assert_eq!(xtr_revenue(&app, day).await, [PRICE, 0, PRICE, 0, PRICE, 1]);
    assert_eq!(rolled(&app, day).await, 1, "the day was rolled up");

    fake.add_incoming_payment_with_affiliate("aff-old", 7_405, &reference, PRICE, (40, 160));
    let r = reconcile(&app).await;
    assert_eq!(r.affiliate_fees_recorded, 1, "{r:?}");
    assert_eq!(
        rolled(&app, day).await,
        0,
        "the fee forgot the day's roll-up"
    );
    assert_eq!(
        xtr_revenue(&app, day).await,
        [PRICE, 0, PRICE, 40, PRICE - 40, 1]
    );
    assert_eq!(rolled(&app, day).await, 1, "rolled again");
    // Read again from the roll-up alone: the same figures.
    assert_eq!(
        xtr_revenue(&app, day).await,
        [PRICE, 0, PRICE, 40, PRICE - 40, 1]
    );

    // Refunded later: the refund gives Telegram's commission back too, so the fee leaves the
    // fees with the payment leaving net (nothing earned, nothing paid out).
    db.execute(
        "UPDATE payments SET outcome = 'refunded', reason = 'refunded_elsewhere'
         WHERE external_id = 'aff-old'",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(xtr_revenue(&app, day).await, [PRICE, PRICE, 0, 0, 0, 1]);
}

/// A referred buyer's Stars payment earns its commission line on the Stars paid (door 3, the
/// payment core's locked path); once Telegram's fee is read, the unpaid line is computed again
/// on the net, once.
#[tokio::test]
async fn the_fee_recomputes_a_referred_payment_s_unpaid_commission_on_the_net() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let reference = buyer(&app, 7_410, -1_007_400_000_010).await;
    let db = app.db().await;
    db.batch_execute(
        "UPDATE referral_program SET enabled = true, first_percent = 20;
         INSERT INTO affiliates (name, code) VALUES ('Partner', 'PARTNER');
         INSERT INTO referral_attributions (subscriber_id, affiliate_id)
         SELECT s.id, a.id FROM subscribers s, affiliates a WHERE s.telegram_user_id = 7410;",
    )
    .await
    .unwrap();
    pay(&app, "aff-ref", 7_410, &reference).await;
    let line = || async {
        let r = app
            .db()
            .await
            .query_one(
                "SELECT amount_minor, base_minor, status FROM commission_lines",
                &[],
            )
            .await
            .unwrap();
        (
            r.get::<_, i64>(0),
            r.get::<_, i64>(1),
            r.get::<_, String>(2),
        )
    };
    assert_eq!(line().await, (PRICE * 20 / 100, PRICE, "pending".into()));

    fake.add_incoming_payment_with_affiliate("aff-ref", 7_410, &reference, PRICE, (50, 200));
    reconcile(&app).await;
    reconcile(&app).await;
    assert_eq!(
        line().await,
        ((PRICE - 50) * 20 / 100, PRICE - 50, "pending".into())
    );
    assert_eq!(app.count("commission_lines").await, 1);
}
