//! Buyers in the bot: whole conversations through `POST /api/webhook/telegram`, the outbox
//! performed against the fake Bot API ([`FakeBot`]), and the rows read back — here the whole
//! path from `/start` to the join link, deliveries repeated and raced, Buy pressed again, a
//! stale order replaced, and card purchase links; and the updates and look-ups the bot's other
//! tests build their conversations from.
//!
//! Webhook replies (the one Bot API call Telegram makes for us) are read from the response
//! body; every other call is made by the effects worker (`worker::run_once`) and read from the
//! fake. Concurrent cases release their tasks together with a barrier and repeat for [`ROUNDS`]
//! rounds.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use subgate::app::worker::{self, RunReport};

use crate::support::{
    fake_bot::{FakeBot, TOKEN},
    helpers::{
        TestApp, WAYFORPAY_ACCOUNT, WAYFORPAY_KEY, assert_wayforpay_accept, wayforpay_callback,
        wayforpay_hmac,
    },
    race::race,
    rows::{PaymentRow, count, payment},
};

pub(crate) const ROUNDS: i64 = 20;

pub(crate) const BOT: &str = "subgate_test_bot";

pub(crate) const PUBLIC_URL: &str = "https://pay.example.com";

pub(crate) const ON_ITS_WAY: &str = "Your invoice is on its way.";

pub(crate) const ALREADY_SENT: &str =
    "Your invoice for this channel or group is in the chat above; it is still valid.";

static UPDATE_ID: AtomicI64 = AtomicI64::new(70_000_001);

pub(crate) fn next_id() -> i64 {
    UPDATE_ID.fetch_add(1, Ordering::Relaxed)
}

// ---- updates as Telegram sends them ----

/// A Telegram user: a person with a username.
pub(crate) fn person(id: i64) -> Value {
    json!({"id": id, "is_bot": false, "first_name": "Ann", "last_name": "Buyer",
           "username": format!("buyer{id}"), "language_code": "en"})
}

pub(crate) fn text_update(from: &Value, text: &str) -> Value {
    json!({
        "update_id": next_id(),
        "message": {
            "message_id": next_id(),
            "date": Utc::now().timestamp(),
            "chat": {"id": from["id"], "type": "private", "first_name": from["first_name"]},
            "from": from,
            "text": text
        }
    })
}

pub(crate) fn button_update(from: &Value, data: &str) -> Value {
    json!({
        "update_id": next_id(),
        "callback_query": {
            "id": format!("cq{}", next_id()),
            "from": from,
            "chat_instance": "ci",
            "message": {"message_id": 1, "date": 0, "chat": {"id": from["id"], "type": "private"}},
            "data": data
        }
    })
}

pub(crate) fn pre_checkout_update(query_id: &str, from: i64, payload: &str, amount: i64) -> Value {
    json!({
        "update_id": next_id(),
        "pre_checkout_query": {
            "id": query_id,
            "from": {"id": from, "is_bot": false, "first_name": "Ann"},
            "currency": "XTR", "total_amount": amount, "invoice_payload": payload
        }
    })
}

/// A Stars `successful_payment`; `subscription`: `(is_first_recurring, renews at)`.
pub(crate) fn payment_update(
    charge_id: &str,
    from: i64,
    payload: &str,
    amount: i64,
    subscription: Option<(bool, DateTime<Utc>)>,
) -> Value {
    let mut paid = json!({
        "currency": "XTR", "total_amount": amount, "invoice_payload": payload,
        "telegram_payment_charge_id": charge_id, "provider_payment_charge_id": ""
    });
    if let Some((first, renews_at)) = subscription {
        paid["is_recurring"] = json!(true);
        paid["is_first_recurring"] = json!(first);
        paid["subscription_expiration_date"] = json!(renews_at.timestamp());
    }
    json!({
        "update_id": next_id(),
        "message": {
            "message_id": next_id(),
            "date": Utc::now().timestamp(),
            "chat": {"id": from, "type": "private", "first_name": "Ann"},
            "from": {"id": from, "is_bot": false, "first_name": "Ann"},
            "successful_payment": paid
        }
    })
}

// ---- set-up and reads ----

/// An app whose Bot API is `fake`, with the bot's username and a public URL.
pub(crate) async fn app_with(fake: &FakeBot) -> TestApp {
    let url = fake.url.clone();
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
        env.insert("TELEGRAM_BOT_USERNAME".into(), BOT.into());
        env.insert("PUBLIC_URL".into(), PUBLIC_URL.into());
    })
    .await
}

pub(crate) async fn run(app: &TestApp) -> RunReport {
    worker::run_once(&app.state).await.unwrap()
}

/// Delivers an update; asserts 200 and returns the reply body.
pub(crate) async fn send(app: &TestApp, update: &Value) -> Value {
    app.post_telegram_update(update.clone()).await.expect(200)
}

/// A channel: `extra` overrides the helper's UAH defaults. Returns its id.
pub(crate) async fn channel(app: &TestApp, chat_id: i64, extra: Value) -> i64 {
    app.create_channel(chat_id, extra).await["id"]
        .as_i64()
        .unwrap()
}

/// A Stars channel at 250 stars for 30 days.
pub(crate) async fn stars_channel(app: &TestApp, chat_id: i64, extra: Value) -> i64 {
    let mut body = json!({"currency": "XTR", "price_minor": 250});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    channel(app, chat_id, body).await
}

/// The inline keyboard of a reply or call: `(text, callback_data or url)` per button; the
/// Mini App's buttons are read with [`web_app_buttons`].
pub(crate) fn buttons(message: &Value) -> Vec<(String, String)> {
    message["reply_markup"]["inline_keyboard"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .flat_map(|row| row.as_array().unwrap().iter())
                .filter(|b| b.get("web_app").is_none())
                .map(|b| {
                    let target = b
                        .get("callback_data")
                        .or_else(|| b.get("url"))
                        .and_then(Value::as_str)
                        .unwrap();
                    (b["text"].as_str().unwrap().to_string(), target.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The buttons of a reply that open the Mini App: `(text, web_app.url)` each.
pub(crate) fn web_app_buttons(message: &Value) -> Vec<(String, String)> {
    message["reply_markup"]["inline_keyboard"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .flat_map(|row| row.as_array().unwrap().iter())
                .filter_map(|b| {
                    let url = b.get("web_app")?.get("url")?.as_str()?;
                    Some((b["text"].as_str().unwrap().to_string(), url.to_string()))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[track_caller]
pub(crate) fn assert_answer(reply: &Value, text: &str) {
    assert_eq!(reply["method"], "answerCallbackQuery", "{reply}");
    assert!(reply["callback_query_id"].as_str().is_some(), "{reply}");
    assert_eq!(reply["text"], text, "{reply}");
}

pub(crate) async fn one_i64(
    app: &TestApp,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> i64 {
    app.db().await.query_one(sql, params).await.unwrap().get(0)
}

/// `(id, reference, status)` of the orders of Telegram user `user` for `channel`.
pub(crate) async fn orders_of(
    app: &TestApp,
    user: i64,
    channel: i64,
) -> Vec<(i64, String, String)> {
    app.db()
        .await
        .query(
            "SELECT o.id, o.reference, o.status FROM orders o
             JOIN subscribers s ON s.id = o.subscriber_id
             WHERE s.telegram_user_id = $1 AND o.channel_id = $2 ORDER BY o.id",
            &[&user, &(channel as i32)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// `(status, expires_at)` of Telegram user `user`'s membership of `channel`.
pub(crate) async fn membership_of(
    app: &TestApp,
    user: i64,
    channel: i64,
) -> Option<(String, DateTime<Utc>)> {
    app.db()
        .await
        .query_opt(
            "SELECT m.status, m.expires_at FROM memberships m
             JOIN subscribers s ON s.id = m.subscriber_id
             WHERE s.telegram_user_id = $1 AND m.channel_id = $2",
            &[&user, &(channel as i32)],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

/// The pending effects of `kind`.
pub(crate) async fn pending(app: &TestApp, kind: &str) -> i64 {
    count(
        app,
        "effects WHERE kind = $1 AND status = 'pending'",
        &[&kind],
    )
    .await
}

/// The texts of the `sendMessage` calls to `user`.
pub(crate) fn messages_to(fake: &FakeBot, user: i64) -> Vec<String> {
    fake.calls_of("sendMessage")
        .into_iter()
        .filter(|c| c.params["chat_id"] == user)
        .map(|c| c.params["text"].as_str().unwrap().to_string())
        .collect()
}

// ---- the whole path ----

#[tokio::test]
async fn a_buyer_starts_buys_pays_gets_in_and_sees_the_subscription() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(
        &app,
        -100_200_001,
        json!({"title": "Rust Weekly", "description": "News every week."}),
    )
    .await;
    let buyer = person(7001);

    // /start: the catalogue, in the webhook reply; nothing is called.
    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert_eq!(reply["method"], "sendMessage");
    assert_eq!(reply["chat_id"], 7001);
    let text = reply["text"].as_str().unwrap();
    for part in ["Rust Weekly", "News every week.", "250 ⭐ for 30 days"] {
        assert!(text.contains(part), "{part:?} missing in {text}");
    }
    assert_eq!(
        buttons(&reply),
        [("Buy: Rust Weekly · 250 ⭐".to_string(), format!("b:{c}"))]
    );
    assert!(fake.calls().is_empty(), "{:?}", fake.methods());

    // Buy: the button is answered in the reply, the invoice goes through the outbox.
    let reply = send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    assert_answer(&reply, ON_ITS_WAY);
    let row = app
        .db()
        .await
        .query_one(
            "SELECT username, display_name FROM subscribers WHERE telegram_user_id = 7001",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("buyer7001".to_string(), "Ann Buyer".to_string())
    );
    let orders = orders_of(&app, 7001, c).await;
    assert_eq!(orders.len(), 1);
    let (order_id, reference, status) = orders[0].clone();
    assert_eq!(status, "pending");
    assert_eq!(pending(&app, "invoice").await, 1);
    run(&app).await;
    let invoices = fake.calls_of("sendInvoice");
    assert_eq!(invoices.len(), 1);
    assert_eq!(
        invoices[0].params,
        json!({"chat_id": 7001, "title": "Rust Weekly", "description": "News every week.",
               "payload": reference, "currency": "XTR",
               "prices": [{"label": "30 days of access", "amount": 250}]})
    );

    // Telegram's pre-checkout and the payment: through door 3 and the core, as ever.
    let answer = send(&app, &pre_checkout_update("q-7001", 7001, &reference, 250)).await;
    assert_eq!(answer["ok"], true, "{answer}");
    let paid = send(
        &app,
        &payment_update("ch-7001", 7001, &reference, 250, None),
    )
    .await;
    assert_eq!(paid, json!({}));
    assert_eq!(
        payment(&app, "ch-7001").await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: false
        }
    );
    let (status, _) = membership_of(&app, 7001, c).await.unwrap();
    assert_eq!(status, "active");
    assert_eq!(
        count(
            &app,
            "orders WHERE id = $1 AND status = 'paid'",
            &[&order_id]
        )
        .await,
        1
    );

    // The grant message with the join link.
    fake.clear_calls();
    run(&app).await;
    assert_eq!(fake.methods(), ["createChatInviteLink", "sendMessage"]);
    let grant = &messages_to(&fake, 7001)[0];
    assert!(
        grant.contains("Rust Weekly") && grant.contains("https://t.me/+fake"),
        "{grant}"
    );

    // /subscriptions: the membership, its expiry and a renew button.
    let reply = send(&app, &text_update(&buyer, "/subscriptions")).await;
    let text = reply["text"].as_str().unwrap();
    assert!(
        text.contains("Rust Weekly") && text.contains("Active until"),
        "{text}"
    );
    assert_eq!(
        buttons(&reply),
        [("Renew: Rust Weekly".to_string(), format!("b:{c}"))]
    );
}

// ---- deduplication ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_update_delivered_again_gets_the_same_reply_and_changes_nothing() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    let c = stars_channel(&app, -100_200_002, json!({})).await;
    let buyer = person(7002);

    let start = text_update(&buyer, "/start");
    let first = send(&app, &start).await;
    assert_eq!(send(&app, &start).await, first);

    // The same button press delivered several times at once: one order, one invoice.
    let press = button_update(&buyer, &format!("b:{c}"));
    let replies = race(4, |_| {
        let (app, press) = (app.clone(), press.clone());
        async move { send(&app, &press).await }
    })
    .await;
    assert!(replies.iter().all(|r| *r == replies[0]), "{replies:?}");
    assert_answer(&replies[0], ON_ITS_WAY);
    assert_eq!(orders_of(&app, 7002, c).await.len(), 1);
    assert_eq!(pending(&app, "invoice").await, 1);
    assert_eq!(
        one_i64(&app, "SELECT update_id FROM bot_updates", &[]).await,
        press["update_id"].as_i64().unwrap(),
        "one record, the press's: /start wrote nothing and is not recorded"
    );
    run(&app).await;
    assert_eq!(fake.calls_of("sendInvoice").len(), 1);

    // Delivered again later, once the invoice went out: the stored reply, not "already sent".
    assert_answer(&send(&app, &press).await, ON_ITS_WAY);
    assert_eq!(orders_of(&app, 7002, c).await.len(), 1);
    assert_eq!(pending(&app, "invoice").await, 0);
}

/// Deliveries of one update at the same time that all write (a kept promo code, a chosen
/// language) and are not held one after the other by a lock: each acts, the first to record the
/// update wins, the others roll back what they wrote and answer the first's reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twin_deliveries_that_all_write_are_applied_once_and_answered_alike() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    stars_channel(&app, -100_200_040, json!({})).await;
    app.db()
        .await
        .execute(
            "INSERT INTO promo_codes (code, percent_off) VALUES ('TWIN10', 10)",
            &[],
        )
        .await
        .unwrap();
    for round in 0..ROUNDS {
        let user = 7_400 + round;
        let buyer = person(user);
        let text = if round % 2 == 0 {
            "/code twin10"
        } else {
            "/language uk"
        };
        let update = text_update(&buyer, text);
        let replies = race(4, |_| {
            let (app, update) = (app.clone(), update.clone());
            async move { send(&app, &update).await }
        })
        .await;
        assert!(
            replies.iter().all(|r| *r == replies[0]),
            "round {round}: {replies:?}"
        );
        assert_eq!(replies[0]["method"], "sendMessage", "round {round}");
        let id = update["update_id"].as_i64().unwrap();
        assert_eq!(
            count(
                &app,
                "bot_updates WHERE update_id = $1 AND reply IS NOT NULL",
                &[&id]
            )
            .await,
            1,
            "round {round}"
        );
        assert_eq!(
            count(&app, "subscribers WHERE telegram_user_id = $1", &[&user]).await,
            1,
            "round {round}"
        );
        let kept = count(
            &app,
            "bot_promo_codes b JOIN subscribers s ON s.id = b.subscriber_id
             WHERE s.telegram_user_id = $1",
            &[&user],
        )
        .await;
        let language = count(
            &app,
            "subscribers WHERE telegram_user_id = $1 AND language = 'uk'",
            &[&user],
        )
        .await;
        if round % 2 == 0 {
            assert_eq!((kept, language), (1, 0), "round {round}: {}", replies[0]);
        } else {
            assert_eq!((kept, language), (0, 1), "round {round}");
        }
        // And once more afterwards: the stored reply.
        assert_eq!(send(&app, &update).await, replies[0], "round {round}");
    }
    assert_eq!(app.count("bot_updates").await, ROUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pressing_buy_again_never_makes_a_second_order_or_invoice() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    let c = stars_channel(&app, -100_200_003, json!({})).await;

    // One after the other: the second press is told the invoice is above.
    let buyer = person(7003);
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ON_ITS_WAY,
    );
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ALREADY_SENT,
    );
    assert_eq!(orders_of(&app, 7003, c).await.len(), 1);

    // Presses from several devices at once, for many buyers.
    for round in 0..ROUNDS {
        let user = 7_100 + round;
        let buyer = person(user);
        let mut answers: Vec<String> = race(4, |_| {
            let app = app.clone();
            let press = button_update(&buyer, &format!("b:{c}"));
            async move { send(&app, &press).await }
        })
        .await
        .iter()
        .map(|a| a["text"].as_str().unwrap().to_string())
        .collect();
        answers.sort();
        assert_eq!(
            answers,
            [ALREADY_SENT, ALREADY_SENT, ALREADY_SENT, ON_ITS_WAY],
            "round {round}"
        );
        let orders = orders_of(&app, user, c).await;
        assert_eq!(orders.len(), 1, "round {round}: {orders:?}");
        assert_eq!(
            one_i64(
                &app,
                "SELECT count(*) FROM effects WHERE kind = 'invoice' AND order_id = $1",
                &[&orders[0].0]
            )
            .await,
            1,
            "round {round}"
        );
    }
    run(&app).await;
    assert_eq!(fake.calls_of("sendInvoice").len() as i64, 1 + ROUNDS);

    // The schema refuses a second pending bot order for the same buyer and channel.
    let err = app
        .db()
        .await
        .execute(
            "INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency,
                                 via_bot)
             SELECT 'ord_second', subscriber_id, channel_id, amount_minor, currency, true
             FROM orders WHERE status = 'pending' AND via_bot LIMIT 1",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.as_db_error().and_then(|e| e.constraint()),
        Some("orders_one_pending_bot_order")
    );
}

#[tokio::test]
async fn a_stale_order_is_replaced_and_its_old_invoice_refused() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_200_004, json!({})).await;
    let buyer = person(7004);
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    let (old_id, old_reference, _) = orders_of(&app, 7004, c).await[0].clone();
    // Older than the reuse window.
    app.db()
        .await
        .execute(
            "UPDATE orders SET created_at = now() - interval '2 hours' WHERE id = $1",
            &[&old_id],
        )
        .await
        .unwrap();
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ON_ITS_WAY,
    );
    let orders = orders_of(&app, 7004, c).await;
    assert_eq!(orders.len(), 2);
    assert_eq!(
        (orders[0].2.as_str(), orders[1].2.as_str()),
        ("cancelled", "pending")
    );
    let refused = send(
        &app,
        &pre_checkout_update("q-old", 7004, &old_reference, 250),
    )
    .await;
    assert_eq!(refused["ok"], false, "{refused}");
    let ok = send(&app, &pre_checkout_update("q-new", 7004, &orders[1].1, 250)).await;
    assert_eq!(ok["ok"], true, "{ok}");
}

// ---- cards ----

#[tokio::test]
async fn a_card_purchase_link_is_signed_as_wayforpay_checks_and_its_callback_applies() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = channel(&app, -100_200_008, json!({"title": "Card «Club» 🔥"})).await;
    let buyer = person(7008);
    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("199.00 UAH for 30 days"),
        "{reply}"
    );
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ON_ITS_WAY,
    );
    let (_, reference, _) = orders_of(&app, 7008, c).await[0].clone();
    run(&app).await;
    let message = &fake.calls_of("sendMessage")[0].params;
    assert_eq!(message["chat_id"], 7008);
    assert!(
        message["text"].as_str().unwrap().contains("199.00 UAH"),
        "{message}"
    );
    let (label, link) = buttons(message)[0].clone();
    assert_eq!(label, "Pay 199.00 UAH by card");

    let url = url::Url::parse(&link).unwrap();
    assert_eq!(
        (url.scheme(), url.host_str(), url.path()),
        ("https", Some("secure.wayforpay.com"), "/pay")
    );
    let q: HashMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(q["merchantAccount"], WAYFORPAY_ACCOUNT);
    assert_eq!(
        q["merchantDomainName"], "pay.example.com",
        "defaults to PUBLIC_URL's host"
    );
    assert_eq!(q["orderReference"], reference);
    assert_eq!(q["amount"], "199.00");
    assert_eq!(q["currency"], "UAH");
    assert_eq!(q["productName[]"], "Card «Club» 🔥");
    assert_eq!(
        q["serviceUrl"],
        format!("{PUBLIC_URL}/api/webhook/wayforpay")
    );
    assert_eq!(q["returnUrl"], format!("https://t.me/{BOT}"));
    // WayForPay's algorithm, computed here: HMAC-MD5 over the ;-joined signed fields.
    let expected = wayforpay_hmac(
        WAYFORPAY_KEY,
        &[
            &q["merchantAccount"],
            &q["merchantDomainName"],
            &q["orderReference"],
            &q["orderDate"],
            &q["amount"],
            &q["currency"],
            &q["productName[]"],
            &q["productCount[]"],
            &q["productPrice[]"],
        ],
    );
    assert_eq!(q["merchantSignature"], expected);

    // WayForPay's callback for that order (door 2) applies it.
    let body = wayforpay_callback(&reference, &q["amount"], "UAH", "Approved");
    let r = app.post_wayforpay(&body).await;
    assert_wayforpay_accept(&r.expect(200), &reference);
    assert_eq!(
        payment(&app, &reference).await,
        PaymentRow {
            outcome: "applied".into(),
            reason: None,
            renewal: false
        }
    );
    assert_eq!(membership_of(&app, 7008, c).await.unwrap().0, "active");
}

#[tokio::test]
async fn a_card_channel_without_wayforpay_cannot_be_bought() {
    let app = TestApp::spawn_with(|env| {
        env.insert("PUBLIC_URL".into(), String::new());
        env.insert("TELEGRAM_DRY_RUN".into(), "true".into());
    })
    .await;
    let c = channel(&app, -100_200_009, json!({"title": "Cards only"})).await;
    let buyer = person(7009);
    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("Not on sale right now."),
        "{reply}"
    );
    assert!(buttons(&reply).is_empty());
    let reply = send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    assert_answer(
        &reply,
        "Sorry, «Cards only» cannot be paid for right now. Please try again later.",
    );
    assert_eq!(reply["show_alert"], true);
    assert_eq!(app.count("orders").await, 0);
}
