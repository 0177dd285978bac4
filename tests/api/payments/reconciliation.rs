//! Card payments reconciled with the gateway: a buyer is sent a WayForPay purchase link by the
//! bot (through the fake Bot API), the callback never comes, and a reconciliation pass
//! (`reconcile::run_once`) asks the fake WayForPay API (`CHECK_STATUS`) — finding the payment
//! once, chasing a declined one, disbelieving a bad signature, giving up after 72 hours,
//! skipping orders the callback paid meanwhile, and handing refunds to the refund rule. Each
//! test reads the rows, `GET /api/reconciliation` and the fake's requests.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use subgate::payments::gateways::wayforpay::reconcile::{self, Checker, Report};

use crate::{
    bot::conversation::{button_update, channel, membership_of, person, run, send, text_update},
    support::{
        fake_bot::{FakeBot, TOKEN},
        fake_wayforpay::{FakeWayForPay, Script},
        helpers::{
            TestApp, WAYFORPAY_ACCOUNT, WAYFORPAY_KEY, assert_wayforpay_accept, db_now,
            wayforpay_callback, wayforpay_hmac,
        },
    },
};

/// An app whose Bot API and WayForPay API are the fakes.
pub(crate) async fn app_with(bot: &FakeBot, wfp: &FakeWayForPay) -> TestApp {
    let (bot_url, wfp_url) = (bot.url.clone(), wfp.url.clone());
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), bot_url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
        env.insert("TELEGRAM_BOT_USERNAME".into(), "subgate_test_bot".into());
        env.insert("PUBLIC_URL".into(), "https://pay.example.com".into());
        env.insert("WAYFORPAY_API_URL".into(), wfp_url);
        env.insert("RECONCILE_AFTER_SECS".into(), "600".into());
    })
    .await
}

/// A card order whose purchase link the bot sent to `user`: `(order id, reference, channel)`.
pub(crate) async fn card_link(app: &TestApp, user: i64) -> (i64, String, i64) {
    let c = channel(app, -100_300_000 - user, json!({"title": "Card club"})).await;
    let buyer = person(user);
    send(app, &text_update(&buyer, "/start")).await;
    send(app, &button_update(&buyer, &format!("b:{c}"))).await;
    run(app).await;
    let r = app
        .db()
        .await
        .query_one(
            "SELECT o.id, o.reference FROM orders o JOIN subscribers s ON s.id = o.subscriber_id
             WHERE s.telegram_user_id = $1 AND o.channel_id = $2",
            &[&user, &(c as i32)],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), c)
}

/// The check of an order, as a row.
struct Row {
    state: String,
    attempts: i32,
    next_check_at: DateTime<Utc>,
    last_status: Option<String>,
    last_error: Option<String>,
    payment_id: Option<i64>,
}

async fn check(app: &TestApp, order: i64) -> Row {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT state, attempts, next_check_at, last_status, last_error, payment_id
             FROM gateway_checks WHERE order_id = $1",
            &[&order],
        )
        .await
        .unwrap();
    Row {
        state: r.get("state"),
        attempts: r.get("attempts"),
        next_check_at: r.get("next_check_at"),
        last_status: r.get("last_status"),
        last_error: r.get("last_error"),
        payment_id: r.get("payment_id"),
    }
}

/// Makes the order's check due now.
pub(crate) async fn due(app: &TestApp, order: i64) {
    app.db()
        .await
        .execute(
            "UPDATE gateway_checks SET next_check_at = statement_timestamp() WHERE order_id = $1",
            &[&order],
        )
        .await
        .unwrap();
}

pub(crate) async fn pass(app: &TestApp) -> Report {
    reconcile::run_once(&app.state.db, &app.state.config)
        .await
        .unwrap()
}

async fn order_status(app: &TestApp, order: i64) -> String {
    app.get(&format!("/api/orders/{order}")).await.expect(200)["status"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The value of a series in the process-wide recorder (0 when absent).
fn metric(name: &str, label: Option<(&str, &str)>) -> f64 {
    let text = subgate::common::metrics::handle().unwrap().render();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            let base = series.split('{').next().unwrap();
            base == name && label.is_none_or(|(k, v)| series.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|(_, v)| v.parse::<f64>().unwrap())
        .sum()
}

#[tokio::test]
async fn a_lost_callback_is_found_and_applied_once_and_the_late_callback_is_a_duplicate() {
    subgate::common::metrics::install().unwrap();
    let (bot, wfp) = (FakeBot::start().await, FakeWayForPay::start().await);
    let app = app_with(&bot, &wfp).await;
    let (order, reference, c) = card_link(&app, 8101).await;

    // The link was recorded and the order is first asked about RECONCILE_AFTER_SECS later.
    let now = db_now(&app).await;
    let link_at: Option<DateTime<Utc>> = app
        .db()
        .await
        .query_one(
            "SELECT purchase_link_at FROM orders WHERE id = $1",
            &[&order],
        )
        .await
        .unwrap()
        .get(0);
    assert!(link_at.is_some_and(|t| (now - t).num_seconds() < 60));
    let first = check(&app, order).await;
    assert_eq!(first.state, "chasing");
    let wait = (first.next_check_at - now).num_seconds();
    assert!((540..=600).contains(&wait), "{wait}");
    // Not due yet: nothing is asked.
    assert_eq!(pass(&app).await.checked, 0);
    assert!(wfp.received().is_empty());

    wfp.script(&reference, Script::status("Approved", "199.00"));
    due(&app, order).await;
    let found_before = metric("subgate_reconciliation_found_total", None);
    let approved_before = metric(
        "subgate_reconciliation_checks_total",
        Some(("result", "approved")),
    );
    let report = pass(&app).await;
    assert_eq!((report.checked, report.found), (1, 1), "{report:?}");

    // The request was signed over merchantAccount;orderReference.
    let sent = &wfp.received()[0];
    assert!(sent.signature_ok, "{:?}", sent.body);
    assert_eq!(sent.body["transactionType"], "CHECK_STATUS");
    assert_eq!(sent.body["merchantAccount"], WAYFORPAY_ACCOUNT);
    assert_eq!(sent.body["orderReference"], reference.as_str());
    assert_eq!(
        sent.body["merchantSignature"],
        wayforpay_hmac(WAYFORPAY_KEY, &[WAYFORPAY_ACCOUNT, &reference]).as_str()
    );

    // Through the core as the callback would be: the order is paid, the buyer is a member.
    let db = app.db().await;
    let p = db
        .query_one(
            "SELECT id, gateway, external_id, outcome, amount_minor FROM payments",
            &[],
        )
        .await
        .unwrap();
    let payment_id: i64 = p.get("id");
    assert_eq!(p.get::<_, String>("gateway"), "wayforpay");
    assert_eq!(p.get::<_, String>("external_id"), reference);
    assert_eq!(p.get::<_, String>("outcome"), "applied");
    assert_eq!(p.get::<_, i64>("amount_minor"), 19900);
    assert_eq!(order_status(&app, order).await, "paid");
    let (status, expires) = membership_of(&app, 8101, c).await.unwrap();
    assert_eq!(status, "active");
    let row = check(&app, order).await;
    assert_eq!(
        (
            row.state.as_str(),
            row.payment_id,
            row.last_status.as_deref()
        ),
        ("found", Some(payment_id), Some("Approved"))
    );
    assert_eq!(row.attempts, 1);
    assert!(metric("subgate_reconciliation_found_total", None) >= found_before + 1.0);
    assert!(
        metric(
            "subgate_reconciliation_checks_total",
            Some(("result", "approved"))
        ) >= approved_before + 1.0
    );

    // Staff see it.
    let page = app.get("/api/reconciliation").await.expect(200);
    assert_eq!(page["counts"]["found"], 1);
    assert_eq!(page["counts"]["chasing"], 0);
    let item = &page["items"][0];
    assert_eq!(item["order_id"], order);
    assert_eq!(item["reference"], reference.as_str());
    assert_eq!(item["state"], "found");
    assert_eq!(item["payment_id"], payment_id);
    assert!(item["purchase_link_at"].is_string());

    // The late callback is a duplicate: acknowledged, no second payment, no second extension.
    let body = wayforpay_callback(&reference, "199.00", "UAH", "Approved");
    assert_wayforpay_accept(&app.post_wayforpay(&body).await.expect(200), &reference);
    assert_eq!(app.count("payments").await, 1);
    assert_eq!(
        app.count("membership_events WHERE cause = 'payment'").await,
        1
    );
    assert_eq!(membership_of(&app, 8101, c).await.unwrap().1, expires);
    // And the order is not asked about again.
    due(&app, order).await;
    assert_eq!(pass(&app).await.checked, 0);
    assert_eq!(wfp.asked_about(&reference), 1);
}

#[tokio::test]
async fn a_declined_order_stays_pending_and_is_asked_again_with_back_off() {
    let (bot, wfp) = (FakeBot::start().await, FakeWayForPay::start().await);
    let app = app_with(&bot, &wfp).await;
    let (order, reference, _) = card_link(&app, 8102).await;

    let mut expected_wait = 60;
    for (n, status) in ["Declined", "Expired", "InProcessing"].iter().enumerate() {
        wfp.script(&reference, Script::status(status, "199.00"));
        due(&app, order).await;
        let report = pass(&app).await;
        assert_eq!((report.checked, report.retried), (1, 1), "{report:?}");
        let now = db_now(&app).await;
        let row = check(&app, order).await;
        assert_eq!(row.state, "chasing");
        assert_eq!(row.attempts, n as i32 + 1);
        assert_eq!(row.last_status.as_deref(), Some(*status));
        assert_eq!(row.last_error, None);
        let wait = (row.next_check_at - now).num_seconds();
        let (low, high) = (expected_wait * 8 / 10 - 2, expected_wait * 12 / 10);
        assert!((low..=high).contains(&wait), "{status}: {wait} s");
        expected_wait *= 2;
        assert_eq!(order_status(&app, order).await, "pending");
        assert_eq!(app.count("payments").await, 0);
        // Not due again yet.
        assert_eq!(pass(&app).await.checked, 0);
    }
    assert_eq!(wfp.asked_about(&reference), 3);

    // The buyer paid on the fourth look.
    wfp.script(&reference, Script::status("Approved", "199.00"));
    due(&app, order).await;
    assert_eq!(pass(&app).await.found, 1);
    assert_eq!(order_status(&app, order).await, "paid");
    let filtered = app.get("/api/reconciliation?state=found").await.expect(200);
    assert_eq!(filtered["items"][0]["attempts"], 4);
}

#[tokio::test]
async fn answers_that_cannot_be_believed_change_nothing_and_are_asked_again() {
    let (bot, wfp) = (FakeBot::start().await, FakeWayForPay::start().await);
    let app = app_with(&bot, &wfp).await;
    let (order, reference, c) = card_link(&app, 8103).await;

    let cases: [(Script, &str); 3] = [
        (
            Script::BadSignature {
                status: "Approved".into(),
                amount: "199.00".into(),
            },
            "merchantSignature does not verify",
        ),
        (Script::ServerError, "HTTP 500"),
        (Script::Hang, "no answer within"),
    ];
    let quick = Checker::new(Duration::from_millis(500));
    for (n, (script, error)) in cases.into_iter().enumerate() {
        wfp.script(&reference, script);
        due(&app, order).await;
        let report = quick
            .run(&app.state.db, &app.state.config, &|| false)
            .await
            .unwrap();
        assert_eq!(
            (report.checked, report.retried),
            (1, 1),
            "{error}: {report:?}"
        );
        let row = check(&app, order).await;
        assert_eq!(row.state, "chasing", "{error}");
        assert_eq!(row.attempts, n as i32 + 1);
        assert_eq!(
            row.last_status, None,
            "an unbelieved answer's status is not kept"
        );
        assert!(
            row.last_error.as_deref().is_some_and(|e| e.contains(error)),
            "{:?}",
            row.last_error
        );
        assert_eq!(order_status(&app, order).await, "pending");
        assert_eq!(app.count("payments").await, 0);
        assert!(membership_of(&app, 8103, c).await.is_none());
    }
    // An order WayForPay does not know: its unsigned answer is reported, the order chased on.
    let (other, other_ref, _) = card_link(&app, 8104).await;
    due(&app, other).await;
    pass(&app).await;
    let row = check(&app, other).await;
    assert_eq!(row.state, "chasing");
    assert_eq!(
        row.last_error.as_deref(),
        Some("no status in the answer: Order not found (1112)")
    );
    assert_eq!(wfp.asked_about(&other_ref), 1);
    let page = app
        .get("/api/reconciliation?state=chasing")
        .await
        .expect(200);
    assert_eq!(page["counts"]["chasing"], 2);
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn an_order_still_unpaid_72_hours_after_its_link_is_given_up() {
    let (bot, wfp) = (FakeBot::start().await, FakeWayForPay::start().await);
    let app = app_with(&bot, &wfp).await;
    let (late, late_ref, _) = card_link(&app, 8105).await;
    let (near, near_ref, _) = card_link(&app, 8106).await;
    wfp.script(&late_ref, Script::status("Declined", "199.00"));
    wfp.script(&near_ref, Script::status("Declined", "199.00"));
    let db = app.db().await;
    for (order, ago) in [(late, "73 hours"), (near, "71 hours 59 minutes 30 seconds")] {
        db.execute(
            &format!(
                "UPDATE orders SET purchase_link_at = statement_timestamp() - interval '{ago}'
                 WHERE id = $1"
            ),
            &[&order],
        )
        .await
        .unwrap();
        due(&app, order).await;
    }
    let report = pass(&app).await;
    assert_eq!((report.checked, report.gave_up), (2, 1), "{report:?}");
    assert_eq!(check(&app, late).await.state, "gave_up");
    // The other is asked once more, at its deadline rather than after a whole back-off.
    let row = check(&app, near).await;
    assert_eq!(row.state, "chasing");
    let deadline: DateTime<Utc> = db
        .query_one(
            "SELECT purchase_link_at + interval '72 hours' FROM orders WHERE id = $1",
            &[&near],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(row.next_check_at, deadline);
    // A given-up order is never asked again, and stays pending for the buyer.
    due(&app, late).await;
    pass(&app).await;
    assert_eq!(wfp.asked_about(&late_ref), 1);
    assert_eq!(order_status(&app, late).await, "pending");
    let page = app
        .get("/api/reconciliation?state=gave_up")
        .await
        .expect(200);
    assert_eq!(page["items"][0]["order_id"], late);
    assert_eq!(page["items"][0]["last_status"], "Declined");
}

#[tokio::test]
async fn an_order_paid_or_cancelled_meanwhile_is_settled_without_a_call() {
    let (bot, wfp) = (FakeBot::start().await, FakeWayForPay::start().await);
    let app = app_with(&bot, &wfp).await;
    let (paid, paid_ref, _) = card_link(&app, 8107).await;
    let (cancelled, _, _) = card_link(&app, 8108).await;
    let body = wayforpay_callback(&paid_ref, "199.00", "UAH", "Approved");
    app.post_wayforpay(&body).await.expect(200);
    app.post(&format!("/api/orders/{cancelled}/cancel"), Value::Null)
        .await
        .expect(200);
    due(&app, paid).await;
    due(&app, cancelled).await;
    let report = pass(&app).await;
    assert_eq!(
        (report.settled_unasked, report.checked),
        (2, 0),
        "{report:?}"
    );
    assert!(wfp.received().is_empty(), "no call was made");
    for order in [paid, cancelled] {
        let row = check(&app, order).await;
        assert_eq!((row.state.as_str(), row.attempts), ("settled", 0));
    }
    let page = app.get("/api/reconciliation").await.expect(200);
    assert_eq!(page["counts"]["settled"], 2);
}

#[tokio::test]
async fn a_refunded_answer_goes_to_the_refund_rule_and_settles() {
    let (bot, wfp) = (FakeBot::start().await, FakeWayForPay::start().await);
    let app = app_with(&bot, &wfp).await;
    let (refunded, refunded_ref, c1) = card_link(&app, 8109).await;
    let (voided, voided_ref, c2) = card_link(&app, 8110).await;
    wfp.script(&refunded_ref, Script::status("Refunded", "199.00"));
    wfp.script(&voided_ref, Script::status("Voided", "199.00"));
    due(&app, refunded).await;
    due(&app, voided).await;
    let report = pass(&app).await;
    assert_eq!((report.checked, report.refunded), (2, 2), "{report:?}");
    for (order, reference, status) in [
        (refunded, &refunded_ref, "Refunded"),
        (voided, &voided_ref, "Voided"),
    ] {
        let row = check(&app, order).await;
        assert_eq!(row.state, "settled");
        assert_eq!(row.last_status.as_deref(), Some(status));
        // No payment of that order was stored: the refund is recorded as it, and the check
        // names that row.
        let payment = app
            .get(&format!("/api/payments?order_id={order}"))
            .await
            .expect(200)["items"][0]
            .clone();
        assert_eq!(
            (
                payment["outcome"].as_str(),
                payment["reason"].as_str(),
                payment["external_id"].as_str()
            ),
            (
                Some("refunded"),
                Some("refunded_before_payment"),
                Some(reference.as_str())
            )
        );
        assert_eq!(row.payment_id, payment["id"].as_i64());
        assert_eq!(order_status(&app, order).await, "paid");
    }
    assert_eq!(app.count("payments").await, 2);
    due(&app, refunded).await;
    assert_eq!(pass(&app).await.checked, 0);
    // The callback of the refunded payment, late: a duplicate that grants nothing.
    for reference in [&refunded_ref, &voided_ref] {
        let ack = app
            .post_wayforpay(&wayforpay_callback(reference, "199.00", "UAH", "Approved"))
            .await
            .expect(200);
        assert_wayforpay_accept(&ack, reference);
    }
    assert_eq!(app.count("payments").await, 2);
    for c in [c1, c2] {
        assert_eq!(membership_of(&app, 8109, c).await, None);
        assert_eq!(membership_of(&app, 8110, c).await, None);
    }
}

#[tokio::test]
async fn a_refunded_answer_that_cannot_be_recorded_settles_nothing() {
    let (bot, wfp) = (FakeBot::start().await, FakeWayForPay::start().await);
    let app = app_with(&bot, &wfp).await;
    let (order, reference, _) = card_link(&app, 8111).await;
    // Signed, but its amount has more decimals than UAH has: no payment could be stored.
    wfp.script(&reference, Script::status("Refunded", "199.001"));
    due(&app, order).await;
    let report = pass(&app).await;
    assert_eq!((report.checked, report.retried), (1, 1), "{report:?}");
    let row = check(&app, order).await;
    assert_eq!((row.state.as_str(), row.payment_id), ("chasing", None));
    assert_eq!(row.last_status.as_deref(), Some("Refunded"));
    assert!(row.next_check_at > db_now(&app).await, "asked again later");
    assert_eq!(order_status(&app, order).await, "pending");
    assert_eq!(app.count("payments").await, 0);
}

#[tokio::test]
async fn the_reconciliation_list_pages_filters_and_needs_a_token() {
    let (bot, wfp) = (FakeBot::start().await, FakeWayForPay::start().await);
    let app = app_with(&bot, &wfp).await;
    let mut orders = Vec::new();
    for user in 8111..8114 {
        orders.push(card_link(&app, user).await.0);
    }
    let first = app.get("/api/reconciliation?limit=2").await.expect(200);
    let ids: Vec<i64> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["order_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, orders[..2]);
    assert_eq!(first["next_after"], orders[1]);
    assert_eq!(first["counts"]["chasing"], 3);
    let rest = app
        .get(&format!("/api/reconciliation?limit=2&after={}", orders[1]))
        .await
        .expect(200);
    assert_eq!(rest["items"][0]["order_id"], orders[2]);
    assert_eq!(rest["next_after"], Value::Null);
    assert_eq!(
        app.get("/api/reconciliation?state=found").await.expect(200)["items"],
        json!([])
    );
    let bad = app.get("/api/reconciliation?state=lost").await.expect(422);
    assert!(bad["errors"]["state"].as_str().unwrap().contains("chasing"));
    let anonymous = app
        .request(
            axum::http::Method::GET,
            "/api/reconciliation",
            &[],
            String::new(),
        )
        .await;
    assert_eq!(anonymous.status.as_u16(), 401);
}
