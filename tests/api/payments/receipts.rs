//! Fiscal receipts (API.md "Fiscal receipts (Checkbox)") against a fake Checkbox: a UAH card
//! payment through door 1 (the fast path), WayForPay (the locked path, and its `CHECK_STATUS`
//! reconcile) or Stripe owes one sale receipt, written with the payment and issued by the effects worker — the cashier signed in,
//! the shift opened when none is, the receipt read until done — and the buyer gets its link
//! once; Stars, other currencies, payments in review and a service without Checkbox owe none;
//! failures are retried, a receipt failing for good is `failed` for staff and access is granted
//! anyway; a refund at the gateway owes one return receipt; and two workers on one receipt, or a
//! worker dying after Checkbox accepted it, still leave one receipt at Checkbox.

use std::time::Duration;

use serde_json::{Value, json};
use subgate::app::worker::{Options, Worker};

use crate::{
    payments::{
        reconciliation,
        stripe::{post_event, session_completed},
    },
    support::{
        effects::{make_due, payment_update, run, run_until_done, stars_channel},
        fake_bot::{FakeBot, TOKEN},
        fake_checkbox::{self, FakeCheckbox},
        fake_stripe,
        fake_wayforpay::{FakeWayForPay, Script},
        helpers::{TestApp, assert_wayforpay_accept, id, reference, wayforpay_callback},
    },
};

/// An app with a fake Bot API and, with `checkbox`, a fake Checkbox (and Stripe configured).
pub(crate) async fn app(bot: &FakeBot, checkbox: Option<&FakeCheckbox>) -> TestApp {
    let (bot_url, checkbox_url) = (bot.url.clone(), checkbox.map(|c| c.url.clone()));
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), bot_url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
        env.insert("STRIPE_SECRET_KEY".into(), fake_stripe::SECRET_KEY.into());
        env.insert(
            "STRIPE_WEBHOOK_SECRET".into(),
            fake_stripe::WEBHOOK_SECRET.into(),
        );
        if let Some(url) = checkbox_url {
            env.insert("CHECKBOX_API_URL".into(), url);
            env.insert(
                "CHECKBOX_LICENSE_KEY".into(),
                fake_checkbox::LICENSE_KEY.into(),
            );
            env.insert("CHECKBOX_LOGIN".into(), fake_checkbox::LOGIN.into());
            env.insert("CHECKBOX_PASSWORD".into(), fake_checkbox::PASSWORD.into());
        }
    })
    .await
}

/// A buyer (`user`), a 199.00 UAH channel (with `extra`) and an order of it.
pub(crate) async fn order(app: &TestApp, user: i64, chat: i64, extra: Value) -> Value {
    let s = id(&app.create_subscriber(user).await);
    let c = id(&app.create_channel(chat, extra).await);
    app.create_order(s, c).await
}

/// Pays `order` through WayForPay (an `Approved` callback of 199 UAH).
async fn pay_wayforpay(app: &TestApp, order: &Value) {
    let r = reference(order);
    let ack = app
        .post_wayforpay(&wayforpay_callback(&r, "199", "UAH", "Approved"))
        .await
        .expect(200);
    assert_wayforpay_accept(&ack, &r);
}

/// The id of the payment of `order`.
pub(crate) async fn payment_of(app: &TestApp, order: &Value) -> i64 {
    app.db()
        .await
        .query_one("SELECT id FROM payments WHERE order_id = $1", &[&id(order)])
        .await
        .unwrap()
        .get(0)
}

/// A `fiscal_receipts` row: (kind, state, receipt id, fiscal code, url, attempts, last error).
#[derive(Debug)]
struct Row {
    kind: String,
    state: String,
    receipt_id: String,
    fiscal_code: Option<String>,
    url: Option<String>,
    attempts: i32,
    last_error: Option<String>,
}

async fn receipts_of(app: &TestApp, payment: i64) -> Vec<Row> {
    app.db()
        .await
        .query(
            "SELECT kind, state, receipt_id::text AS receipt_id, fiscal_code, url, attempts,
                    last_error
             FROM fiscal_receipts WHERE payment_id = $1 ORDER BY id",
            &[&payment],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| Row {
            kind: r.get("kind"),
            state: r.get("state"),
            receipt_id: r.get("receipt_id"),
            fiscal_code: r.get("fiscal_code"),
            url: r.get("url"),
            attempts: r.get("attempts"),
            last_error: r.get("last_error"),
        })
        .collect()
}

/// The `receipt` of `GET /api/payments/{id}`.
async fn receipt_shown(app: &TestApp, payment: i64) -> Value {
    app.get(&format!("/api/payments/{payment}"))
        .await
        .expect(200)["receipt"]
        .clone()
}

/// The bot's messages to `user` that contain `text`.
fn told(bot: &FakeBot, user: i64, text: &str) -> usize {
    bot.delivered_messages()
        .iter()
        .filter(|c| {
            c.params["chat_id"].as_i64() == Some(user)
                && c.params["text"].as_str().is_some_and(|t| t.contains(text))
        })
        .count()
}

/// Checks that payment `payment` has one sale receipt, done, as the fake keeps it, shown to
/// staff, and its link told to `user` once; returns the row.
async fn assert_one_done_sale(
    app: &TestApp,
    bot: &FakeBot,
    checkbox: &FakeCheckbox,
    payment: i64,
    user: i64,
) -> Row {
    let rows = receipts_of(app, payment).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = rows.into_iter().next().unwrap();
    assert_eq!((row.kind.as_str(), row.state.as_str()), ("sale", "done"));
    let url = format!("https://check.checkbox.ua/{}", row.receipt_id);
    assert_eq!(row.url.as_deref(), Some(url.as_str()));
    let kept = checkbox.receipts();
    let at_checkbox: Vec<_> = kept.iter().filter(|r| r.id == row.receipt_id).collect();
    assert_eq!(at_checkbox.len(), 1, "one receipt at Checkbox under our id");
    assert_eq!(
        row.fiscal_code.as_deref(),
        Some(at_checkbox[0].fiscal_code.as_str())
    );
    let good = &at_checkbox[0].body["goods"][0];
    assert_eq!(good["good"]["price"], 19900);
    assert_eq!(good["quantity"], 1000);
    assert_eq!(good["is_return"], false);
    assert!(good["good"]["name"].as_str().is_some_and(|n| !n.is_empty()));
    assert_eq!(
        at_checkbox[0].body["payments"],
        json!([{"type": "CASHLESS", "value": 19900}])
    );
    assert_eq!(
        receipt_shown(app, payment).await,
        json!({"state": "done", "url": url})
    );
    assert_eq!(told(bot, user, &url), 1, "the buyer is told the link once");
    row
}

#[tokio::test]
async fn a_card_payment_in_hryvnias_gets_one_receipt_and_the_buyer_its_link() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = app(&bot, Some(&checkbox)).await;
    let user = 9_710_001;
    let o = order(&app, user, -100_971_001, json!({})).await;
    app.pay_order(&o, "pay_receipt_1").await.expect(200);
    let payment = payment_of(&app, &o).await;
    // Owed with the payment, before any worker ran.
    assert_eq!(
        app.count(&format!(
            "effects WHERE kind = 'fiscal_receipt' AND dedupe_key = 'receipt:sale:{payment}'"
        ))
        .await,
        1
    );
    assert_eq!(
        receipt_shown(&app, payment).await,
        json!({"state": "pending"})
    );

    run_until_done(&app).await;
    assert_one_done_sale(&app, &bot, &checkbox, payment, user).await;
    assert_eq!((checkbox.signins(), checkbox.shifts_opened()), (1, 1));

    // A redelivery owes nothing more; nothing is issued or told again.
    app.pay_order(&o, "pay_receipt_1").await.expect(200);
    run_until_done(&app).await;
    assert_eq!(checkbox.receipts().len(), 1);
    assert_one_done_sale(&app, &bot, &checkbox, payment, user).await;
    // The list shows it too.
    let list = app
        .get(&format!("/api/payments?order_id={}", id(&o)))
        .await
        .expect(200);
    assert_eq!(list["items"][0]["receipt"]["state"], "done");
}

#[tokio::test]
async fn the_buyer_is_told_in_their_language() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = app(&bot, Some(&checkbox)).await;
    let user = 9_710_005;
    let s = app
        .post(
            "/api/subscribers",
            json!({"telegram_user_id": user, "language": "uk"}),
        )
        .await
        .expect(201);
    let c = id(&app.create_channel(-100_971_005, json!({})).await);
    let o = app.create_order(id(&s), c).await;
    app.pay_order(&o, "pay_uk").await.expect(200);
    run_until_done(&app).await;
    let p = payment_of(&app, &o).await;
    let url = assert_one_done_sale(&app, &bot, &checkbox, p, user)
        .await
        .url
        .unwrap();
    assert_eq!(told(&bot, user, "Ваш чек на"), 1);
    assert_eq!(told(&bot, user, &url), 1);
}

#[tokio::test]
async fn wayforpay_and_stripe_payments_get_one_receipt_each() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = app(&bot, Some(&checkbox)).await;
    // A seat-limited channel: the payment takes the core's locked path.
    let wfp = order(&app, 9_710_011, -100_971_011, json!({"seat_limit": 5})).await;
    pay_wayforpay(&app, &wfp).await;
    let stripe = order(&app, 9_710_012, -100_971_012, json!({})).await;
    post_event(
        &app,
        &session_completed(&reference(&stripe), "pi_receipt_1", 19900, "uah"),
    )
    .await
    .expect(200);
    run_until_done(&app).await;
    let a = payment_of(&app, &wfp).await;
    let b = payment_of(&app, &stripe).await;
    assert_one_done_sale(&app, &bot, &checkbox, a, 9_710_011).await;
    assert_one_done_sale(&app, &bot, &checkbox, b, 9_710_012).await;
    assert_eq!(checkbox.receipts().len(), 2);
    // One shift for both.
    assert_eq!(checkbox.shifts_opened(), 1);

    // The Stripe charge is disputed: what it bought is taken back, and its money is returned
    // on a return receipt.
    post_event(
        &app,
        &fake_stripe::event(
            "charge.dispute.created",
            fake_stripe::dispute("pi_receipt_1", "needs_response"),
        ),
    )
    .await
    .expect(200);
    run_until_done(&app).await;
    let rows = receipts_of(&app, b).await;
    assert_eq!(
        rows.iter()
            .map(|r| (r.kind.as_str(), r.state.as_str()))
            .collect::<Vec<_>>(),
        [("sale", "done"), ("return", "done")]
    );
    let kept = checkbox.receipts();
    assert_eq!(kept.len(), 3);
    assert_eq!(kept[2].id, rows[1].receipt_id);
    assert_eq!(kept[2].body["goods"][0]["is_return"], true);
}

#[tokio::test]
async fn a_payment_the_wayforpay_reconcile_finds_gets_one_receipt() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let wfp = FakeWayForPay::start().await;
    let (bot_url, checkbox_url, wfp_url) = (bot.url.clone(), checkbox.url.clone(), wfp.url.clone());
    let app = TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), bot_url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
        env.insert("TELEGRAM_BOT_USERNAME".into(), "subgate_test_bot".into());
        env.insert("PUBLIC_URL".into(), "https://pay.example.com".into());
        env.insert("WAYFORPAY_API_URL".into(), wfp_url);
        env.insert("CHECKBOX_API_URL".into(), checkbox_url);
        env.insert(
            "CHECKBOX_LICENSE_KEY".into(),
            fake_checkbox::LICENSE_KEY.into(),
        );
        env.insert("CHECKBOX_LOGIN".into(), fake_checkbox::LOGIN.into());
        env.insert("CHECKBOX_PASSWORD".into(), fake_checkbox::PASSWORD.into());
    })
    .await;
    // The bot's card link, whose callback never comes; CHECK_STATUS finds it paid.
    let user = 9_710_015;
    let (order_id, order_ref, _) = reconciliation::card_link(&app, user).await;
    wfp.script(&order_ref, Script::status("Approved", "199.00"));
    reconciliation::due(&app, order_id).await;
    reconciliation::pass(&app).await;
    let p: i64 = app
        .db()
        .await
        .query_one("SELECT id FROM payments WHERE order_id = $1", &[&order_id])
        .await
        .unwrap()
        .get(0);
    run_until_done(&app).await;
    assert_one_done_sale(&app, &bot, &checkbox, p, user).await;
}

#[tokio::test]
async fn stars_other_currencies_and_payments_in_review_owe_no_receipt() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = app(&bot, Some(&checkbox)).await;
    // Stars.
    let s = id(&app.create_subscriber(9_710_021).await);
    let c = stars_channel(&app, -100_971_021).await;
    let stars = app.create_order(s, c).await;
    app.post_telegram_update(payment_update(
        "stx_receipt",
        9_710_021,
        &reference(&stars),
        50,
    ))
    .await
    .expect(200);
    // Dollars.
    let usd = order(
        &app,
        9_710_022,
        -100_971_022,
        json!({"currency": "USD", "price_minor": 500}),
    )
    .await;
    app.pay_order(&usd, "pay_usd").await.expect(200);
    // Hryvnias, but the wrong amount: in review.
    let review = order(&app, 9_710_023, -100_971_023, json!({})).await;
    let wrong =
        crate::support::helpers::payment_event("pay_review", &reference(&review), 100, "UAH");
    app.post_signed_webhook(&wrong).await.expect(200);

    run_until_done(&app).await;
    for o in [&stars, &usd] {
        let p = payment_of(&app, o).await;
        assert_eq!(
            crate::support::effects::payment_outcome(&app, p).await,
            "applied"
        );
        assert_eq!(receipt_shown(&app, p).await, Value::Null);
    }
    let p = payment_of(&app, &review).await;
    assert_eq!(
        crate::support::effects::payment_outcome(&app, p).await,
        "needs_review"
    );
    assert_eq!(app.count("fiscal_receipts").await, 0);
    assert_eq!(app.count("effects WHERE kind = 'fiscal_receipt'").await, 0);
    assert!(checkbox.received().is_empty());
}

#[tokio::test]
async fn without_checkbox_no_receipt_is_owed() {
    let bot = FakeBot::start().await;
    let app = app(&bot, None).await;
    let o = order(&app, 9_710_031, -100_971_031, json!({})).await;
    app.pay_order(&o, "pay_no_checkbox").await.expect(200);
    let wfp = order(&app, 9_710_032, -100_971_032, json!({"seat_limit": 5})).await;
    pay_wayforpay(&app, &wfp).await;
    run_until_done(&app).await;
    assert_eq!(app.count("payments WHERE outcome = 'applied'").await, 2);
    assert_eq!(app.count("fiscal_receipts").await, 0);
    assert_eq!(app.count("effects WHERE kind = 'fiscal_receipt'").await, 0);
    let p = payment_of(&app, &o).await;
    assert_eq!(receipt_shown(&app, p).await, Value::Null);
}

#[tokio::test]
async fn a_closed_shift_is_opened_and_a_refused_token_signs_the_cashier_in_again() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = app(&bot, Some(&checkbox)).await;
    // Shifts and receipts take a few reads to be registered, as at Checkbox.
    checkbox.set_reads(3, 2);
    // One worker for both payments: it keeps the cashier's token between them.
    let worker = Worker::new(app.state.clone(), Options::default());
    let first = order(&app, 9_710_041, -100_971_041, json!({})).await;
    app.pay_order(&first, "pay_shift_1").await.expect(200);
    worker.run(false, &|| false).await.unwrap();
    let a = payment_of(&app, &first).await;
    assert_eq!(receipts_of(&app, a).await[0].state, "done");
    assert_eq!((checkbox.signins(), checkbox.shifts_opened()), (1, 1));

    // The day ends (the shift is closed) and the token is taken back.
    checkbox.close_shift();
    checkbox.expire_tokens();
    let second = order(&app, 9_710_042, -100_971_042, json!({})).await;
    app.pay_order(&second, "pay_shift_2").await.expect(200);
    worker.run(false, &|| false).await.unwrap();
    let b = payment_of(&app, &second).await;
    let rows = receipts_of(&app, b).await;
    assert_eq!(rows[0].state, "done", "{rows:?}");
    assert_eq!(rows[0].attempts, 1, "done in one attempt: {rows:?}");
    assert_eq!(
        (checkbox.signins(), checkbox.shifts_opened()),
        (2, 2),
        "signed in again once, a new shift opened"
    );
    assert_eq!(checkbox.receipts().len(), 2);
    // Two sign-ins in all: the first, and one after the refused token.
    let signins: Vec<_> = checkbox
        .received()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/api/v1/cashier/signin")
        .collect();
    assert_eq!(signins.len(), 2);
    for s in signins {
        assert_eq!(
            s.body,
            json!({"login": fake_checkbox::LOGIN, "password": fake_checkbox::PASSWORD})
        );
    }
}

#[tokio::test]
async fn a_receipt_failing_a_few_times_is_retried_until_done() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = app(&bot, Some(&checkbox)).await;
    checkbox.fail_next_sells(2);
    let o = order(&app, 9_710_051, -100_971_051, json!({})).await;
    app.pay_order(&o, "pay_retry").await.expect(200);
    let p = payment_of(&app, &o).await;

    run(&app).await;
    let rows = receipts_of(&app, p).await;
    assert_eq!(
        (rows[0].state.as_str(), rows[0].attempts),
        ("pending", 1),
        "{rows:?}"
    );
    assert!(
        rows[0]
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("HTTP 500")),
        "{rows:?}"
    );
    let effect = app
        .db()
        .await
        .query_one(
            "SELECT status, attempts FROM effects WHERE kind = 'fiscal_receipt'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (effect.get::<_, String>(0), effect.get::<_, i32>(1)),
        ("pending".into(), 1)
    );
    // Access did not wait for it.
    assert_eq!(
        app.count("effects WHERE kind = 'grant' AND status = 'done'")
            .await,
        1
    );
    assert_eq!(receipt_shown(&app, p).await, json!({"state": "pending"}));

    make_due(&app).await;
    run_until_done(&app).await;
    let row = assert_one_done_sale(&app, &bot, &checkbox, p, 9_710_051).await;
    assert_eq!(row.attempts, 3);
    assert_eq!(row.last_error, None);
}

#[tokio::test]
async fn a_receipt_in_error_at_checkbox_is_issued_again_under_a_new_id() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = app(&bot, Some(&checkbox)).await;
    checkbox.error_next_receipts(1);
    let o = order(&app, 9_710_055, -100_971_055, json!({})).await;
    app.pay_order(&o, "pay_error").await.expect(200);
    let p = payment_of(&app, &o).await;
    let first = receipts_of(&app, p).await[0].receipt_id.clone();
    run(&app).await;
    let rows = receipts_of(&app, p).await;
    assert_eq!(rows[0].state, "pending");
    assert_ne!(rows[0].receipt_id, first, "its id is used up: a new one");
    assert!(
        rows[0]
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("ERROR") && e.contains("ДПС")),
        "{rows:?}"
    );
    make_due(&app).await;
    run_until_done(&app).await;
    let row = assert_one_done_sale(&app, &bot, &checkbox, p, 9_710_055).await;
    assert_eq!(row.attempts, 2);
    // At Checkbox: the one in ERROR under the first id, the fiscal one under the new id.
    let kept = checkbox.receipts();
    assert_eq!(
        kept.iter()
            .map(|r| (r.id.clone(), r.error))
            .collect::<Vec<_>>(),
        [(first, true), (row.receipt_id, false)]
    );
}

#[tokio::test]
async fn a_receipt_failing_for_good_is_failed_for_staff_and_access_is_granted_anyway() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = app(&bot, Some(&checkbox)).await;
    // Refused: a dead letter at once.
    checkbox.refuse_receipts(true);
    let refused = order(&app, 9_710_061, -100_971_061, json!({})).await;
    app.pay_order(&refused, "pay_refused").await.expect(200);
    run_until_done(&app).await;
    let p = payment_of(&app, &refused).await;
    let rows = receipts_of(&app, p).await;
    assert_eq!(rows[0].state, "failed", "{rows:?}");
    assert!(
        rows[0]
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("refused")),
        "{rows:?}"
    );
    assert_eq!(receipt_shown(&app, p).await, json!({"state": "failed"}));
    let dead = app
        .get(&format!(
            "/api/effects?status=failed&kind=fiscal_receipt&payment_id={p}"
        ))
        .await
        .expect(200);
    assert_eq!(dead["items"].as_array().unwrap().len(), 1, "{dead}");
    assert_eq!(
        app.count("memberships WHERE status = 'active'").await,
        1,
        "access granted anyway"
    );
    assert_eq!(
        app.count("effects WHERE kind = 'grant' AND status = 'done'")
            .await,
        1
    );
    assert!(bot.delivered_messages().iter().all(|c| {
        !c.params["text"]
            .as_str()
            .unwrap_or("")
            .contains("check.checkbox.ua")
    }));

    // Failing transiently past the retry horizon: failed too.
    checkbox.refuse_receipts(false);
    checkbox.fail_next_sells(1000);
    let issued = checkbox.receipts().len();
    let failing = order(&app, 9_710_062, -100_971_062, json!({})).await;
    app.pay_order(&failing, "pay_failing").await.expect(200);
    let options = Options {
        retry_horizon: Duration::ZERO,
        ..Options::default()
    };
    let report = Worker::new(app.state.clone(), options)
        .run(false, &|| false)
        .await
        .unwrap();
    assert!(report.failed >= 1, "{report:?}");
    let p = payment_of(&app, &failing).await;
    assert_eq!(receipts_of(&app, p).await[0].state, "failed");
    assert_eq!(receipt_shown(&app, p).await, json!({"state": "failed"}));
    assert_eq!(checkbox.receipts().len(), issued, "nothing more issued");
}

#[tokio::test]
async fn a_refund_at_the_gateway_gets_one_return_receipt() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = app(&bot, Some(&checkbox)).await;
    let user = 9_710_071;
    let o = order(&app, user, -100_971_071, json!({})).await;
    pay_wayforpay(&app, &o).await;
    run_until_done(&app).await;
    let p = payment_of(&app, &o).await;
    assert_one_done_sale(&app, &bot, &checkbox, p, user).await;

    // Reported twice: one return receipt.
    for _ in 0..2 {
        let ack = app
            .post_wayforpay(&wayforpay_callback(
                &reference(&o),
                "199",
                "UAH",
                "Refunded",
            ))
            .await
            .expect(200);
        assert_wayforpay_accept(&ack, &reference(&o));
    }
    assert_eq!(
        app.count(&format!(
            "effects WHERE kind = 'fiscal_receipt' AND dedupe_key = 'receipt:return:{p}'"
        ))
        .await,
        1
    );
    run_until_done(&app).await;
    let rows = receipts_of(&app, p).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        (rows[1].kind.as_str(), rows[1].state.as_str()),
        ("return", "done")
    );
    let kept = checkbox.receipts();
    assert_eq!(kept.len(), 2);
    let back = kept.iter().find(|r| r.id == rows[1].receipt_id).unwrap();
    assert_eq!(back.body["goods"][0]["is_return"], true);
    assert_eq!(back.body["goods"][0]["good"]["price"], 19900);
    assert_eq!(back.body["payments"][0]["value"], 19900);
    let url = rows[1].url.clone().unwrap();
    assert_eq!(told(&bot, user, &url), 1, "the refund receipt's link, once");
    // The payment still shows its sale receipt.
    assert_eq!(receipt_shown(&app, p).await["state"], "done");
}

/// Expires the lease of the receipt's effect, as if its worker had died.
async fn lease_runs_out(app: &TestApp) {
    app.db()
        .await
        .execute(
            "UPDATE effects SET lease_until = now() - interval '1 second'
             WHERE kind = 'fiscal_receipt'",
            &[],
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_on_one_receipt_leave_one_receipt_at_checkbox() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = app(&bot, Some(&checkbox)).await;
    let user = 9_710_081;
    let o = order(&app, user, -100_971_081, json!({})).await;
    app.pay_order(&o, "pay_two_workers").await.expect(200);
    let p = payment_of(&app, &o).await;
    // The first worker's receipt call reaches Checkbox and is held there.
    let hold = checkbox.hold_sell();
    let state = app.state.clone();
    let first = tokio::spawn(async move {
        let options = Options {
            concurrency: 1,
            lease: Duration::from_secs(300),
            ..Options::default()
        };
        Worker::new(state, options)
            .run(false, &|| false)
            .await
            .unwrap()
    });
    hold.arrived().await;
    // Its lease runs out: a second worker claims the receipt and issues it again, same id.
    lease_runs_out(&app).await;
    run_until_done(&app).await;
    assert_one_done_sale(&app, &bot, &checkbox, p, user).await;

    // The first worker's call comes back: it records nothing over the second's.
    hold.release();
    let report = first.await.unwrap();
    assert_eq!(report.superseded, 1, "{report:?}");
    assert_eq!(checkbox.receipts().len(), 1);
    run_until_done(&app).await;
    assert_one_done_sale(&app, &bot, &checkbox, p, user).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_racing_over_many_receipts_issue_each_once() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = app(&bot, Some(&checkbox)).await;
    let mut payments = Vec::new();
    for round in 0..3i64 {
        for k in 0..4i64 {
            let user = 9_710_100 + round * 10 + k;
            let o = order(&app, user, -100_971_100 - round * 10 - k, json!({})).await;
            app.pay_order(&o, &format!("pay_race_{round}_{k}"))
                .await
                .expect(200);
            payments.push((payment_of(&app, &o).await, user));
        }
        crate::support::race::race(2, |_| {
            let state = app.state.clone();
            async move {
                Worker::new(state, Options::default())
                    .run(false, &|| false)
                    .await
                    .unwrap()
            }
        })
        .await;
        run_until_done(&app).await;
        for (p, user) in &payments {
            assert_one_done_sale(&app, &bot, &checkbox, *p, *user).await;
        }
        assert_eq!(checkbox.receipts().len(), payments.len(), "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_dying_after_checkbox_accepted_the_receipt_leaves_one_receipt() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = app(&bot, Some(&checkbox)).await;
    let user = 9_710_091;
    let o = order(&app, user, -100_971_091, json!({})).await;
    app.pay_order(&o, "pay_crash").await.expect(200);
    let p = payment_of(&app, &o).await;
    let hold = checkbox.hold_sell();
    let state = app.state.clone();
    let dying = tokio::spawn(async move {
        Worker::new(state, Options::default())
            .run(false, &|| false)
            .await
    });
    // Checkbox has the receipt; the worker dies before it hears so.
    hold.arrived().await;
    dying.abort();
    assert!(dying.await.unwrap_err().is_cancelled());
    assert_eq!(checkbox.receipts().len(), 1);
    assert_eq!(receipts_of(&app, p).await[0].state, "pending");

    lease_runs_out(&app).await;
    run_until_done(&app).await;
    assert_one_done_sale(&app, &bot, &checkbox, p, user).await;
    assert_eq!(checkbox.receipts().len(), 1);
    // The retry found it by its id.
    assert!(
        checkbox
            .received()
            .iter()
            .filter(|r| r.path == "/api/v1/receipts/sell")
            .count()
            >= 2
    );
}
