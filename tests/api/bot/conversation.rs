//! Buyers in the bot: whole conversations through `POST /api/webhook/telegram`, the outbox
//! performed against the fake Bot API ([`FakeBot`]), and the rows read back.
//!
//! Webhook replies (the one Bot API call Telegram makes for us) are read from the response
//! body; every other call is made by the effects worker (`worker::run_once`) and read from the
//! fake. Concurrent cases release their tasks together with a barrier and repeat for
//! [`ROUNDS`] rounds.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
};

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use subgate::{
    telegram::recovery,
    worker::{self, RunReport},
};
use tokio::sync::Barrier;

use crate::support::{
    fake_bot::{FakeBot, TOKEN},
    helpers::{
        TestApp, WAYFORPAY_ACCOUNT, WAYFORPAY_KEY, assert_wayforpay_accept, wayforpay_callback,
        wayforpay_hmac,
    },
};

const ROUNDS: i64 = 20;
pub(crate) const BOT: &str = "subgate_test_bot";
pub(crate) const PUBLIC_URL: &str = "https://pay.example.com";
pub(crate) const ON_ITS_WAY: &str = "Your invoice is on its way.";
pub(crate) const ALREADY_SENT: &str =
    "Your invoice for this channel is in the chat above; it is still valid.";
const INVALID: &str = "This button is no longer valid. Send /start to see the channels.";
const UNKNOWN_CHANNEL: &str = "Sorry, this channel is not available.";

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

/// The inline keyboard of a reply or call: `(text, callback_data or url)` per button.
pub(crate) fn buttons(message: &Value) -> Vec<(String, String)> {
    message["reply_markup"]["inline_keyboard"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .flat_map(|row| row.as_array().unwrap().iter())
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

/// `(outcome, reason, renewal)` of the payment with this external id.
async fn payment(app: &TestApp, external_id: &str) -> (String, Option<String>, bool) {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT outcome, reason, renewal FROM payments WHERE external_id = $1",
            &[&external_id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// The pending effects of `kind`.
async fn pending(app: &TestApp, kind: &str) -> i64 {
    one_i64(
        app,
        "SELECT count(*) FROM effects WHERE kind = $1 AND status = 'pending'",
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
        ("applied".into(), None, false)
    );
    let (status, _) = membership_of(&app, 7001, c).await.unwrap();
    assert_eq!(status, "active");
    assert_eq!(
        one_i64(
            &app,
            "SELECT count(*) FROM orders WHERE id = $1 AND status = 'paid'",
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
    let barrier = Arc::new(Barrier::new(4));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (app, barrier, press) = (app.clone(), barrier.clone(), press.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                send(&app, &press).await
            })
        })
        .collect();
    let mut replies = Vec::new();
    for t in tasks {
        replies.push(t.await.unwrap());
    }
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
        let barrier = Arc::new(Barrier::new(4));
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (app, barrier, update) = (app.clone(), barrier.clone(), update.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    send(&app, &update).await
                })
            })
            .collect();
        let mut replies = Vec::new();
        for t in tasks {
            replies.push(t.await.unwrap());
        }
        assert!(
            replies.iter().all(|r| *r == replies[0]),
            "round {round}: {replies:?}"
        );
        assert_eq!(replies[0]["method"], "sendMessage", "round {round}");
        let id = update["update_id"].as_i64().unwrap();
        assert_eq!(
            one_i64(
                &app,
                "SELECT count(*) FROM bot_updates WHERE update_id = $1 AND reply IS NOT NULL",
                &[&id]
            )
            .await,
            1,
            "round {round}"
        );
        assert_eq!(
            one_i64(
                &app,
                "SELECT count(*) FROM subscribers WHERE telegram_user_id = $1",
                &[&user]
            )
            .await,
            1,
            "round {round}"
        );
        let kept = one_i64(
            &app,
            "SELECT count(*) FROM bot_promo_codes b JOIN subscribers s ON s.id = b.subscriber_id
             WHERE s.telegram_user_id = $1",
            &[&user],
        )
        .await;
        let language = one_i64(
            &app,
            "SELECT count(*) FROM subscribers WHERE telegram_user_id = $1 AND language = 'uk'",
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
        let barrier = Arc::new(Barrier::new(4));
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (app, barrier) = (app.clone(), barrier.clone());
                let press = button_update(&buyer, &format!("b:{c}"));
                tokio::spawn(async move {
                    barrier.wait().await;
                    send(&app, &press).await
                })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap()["text"].as_str().unwrap().to_string());
        }
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

// ---- recurring Stars ----

#[tokio::test]
async fn a_stars_subscription_renews_twice_then_is_cancelled() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(
        &app,
        -100_200_005,
        json!({"title": "Daily", "recurring": true, "billing_period_days": 30}),
    )
    .await;
    let buyer = person(7005);

    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("250 ⭐ every 30 days, renews automatically"),
        "{reply}"
    );
    assert_eq!(buttons(&reply)[0].0, "Subscribe: Daily · 250 ⭐");
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    let (order_id, reference, _) = orders_of(&app, 7005, c).await[0].clone();

    // The invoice is a subscription link, sent as a URL button and kept on the order.
    run(&app).await;
    let links = fake.calls_of("createInvoiceLink");
    assert_eq!(links.len(), 1);
    assert_eq!(links[0].params["subscription_period"], 2_592_000);
    assert_eq!(links[0].params["payload"], reference.as_str());
    assert_eq!(links[0].params["currency"], "XTR");
    let sent = &fake.calls_of("sendMessage")[0].params;
    let (_, url) = buttons(sent)[0].clone();
    assert!(url.starts_with("https://t.me/$fake_subscription_"), "{url}");
    let stored: Option<String> = app
        .db()
        .await
        .query_one(
            "SELECT invoice_link FROM orders WHERE id = $1",
            &[&order_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored.as_deref(), Some(url.as_str()));

    // The first charge.
    assert_eq!(
        send(&app, &pre_checkout_update("q-7005", 7005, &reference, 250)).await["ok"],
        true
    );
    let now = Utc::now();
    send(
        &app,
        &payment_update(
            "sub-1",
            7005,
            &reference,
            250,
            Some((true, now + Duration::days(30))),
        ),
    )
    .await;
    assert_eq!(
        payment(&app, "sub-1").await,
        ("applied".into(), None, false)
    );
    let (_, first_expiry) = membership_of(&app, 7005, c).await.unwrap();
    let sub = app
        .get(&format!(
            "/api/star-subscriptions?subscriber_id={}",
            one_i64(
                &app,
                "SELECT id::bigint FROM subscribers WHERE telegram_user_id = 7005",
                &[]
            )
            .await
        ))
        .await
        .expect(200)["items"][0]
        .clone();
    assert_eq!(sub["charge_id"], "sub-1");
    assert_eq!(sub["status"], "active");
    assert_eq!(sub["order_id"], order_id);

    // Two renewals: same payload, new charge ids, each one more period.
    let mut expiry = first_expiry;
    for (n, charge) in ["sub-2", "sub-3"].iter().enumerate() {
        let renews_at = now + Duration::days(30 * (n as i64 + 2));
        let r = send(
            &app,
            &payment_update(charge, 7005, &reference, 250, Some((false, renews_at))),
        )
        .await;
        assert_eq!(r, json!({}));
        assert_eq!(
            payment(&app, charge).await,
            ("applied".into(), None, true),
            "{charge}"
        );
        let (status, after) = membership_of(&app, 7005, c).await.unwrap();
        assert_eq!(status, "active");
        assert_eq!(
            after,
            expiry + Duration::days(30),
            "{charge} extends by one period"
        );
        expiry = after;
        let kept: DateTime<Utc> = app
            .db()
            .await
            .query_one(
                "SELECT subscription_expires_at FROM payments WHERE external_id = $1",
                &[charge],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(kept.timestamp(), renews_at.timestamp());
    }
    let sub_row = app
        .get(&format!("/api/star-subscriptions/{}", sub["id"]))
        .await
        .expect(200);
    assert_eq!(
        DateTime::parse_from_rfc3339(sub_row["expires_at"].as_str().unwrap())
            .unwrap()
            .timestamp(),
        (now + Duration::days(90)).timestamp()
    );
    // A redelivered renewal is one payment.
    send(
        &app,
        &payment_update("sub-3", 7005, &reference, 250, Some((false, now))),
    )
    .await;
    assert_eq!(membership_of(&app, 7005, c).await.unwrap().1, expiry);

    // /subscriptions: renews automatically, with a cancel-renewal button and no renew button.
    let reply = send(&app, &text_update(&buyer, "/subscriptions")).await;
    let text = reply["text"].as_str().unwrap();
    assert!(text.contains("Renews automatically on"), "{text}");
    assert_eq!(
        buttons(&reply),
        [(
            "Cancel renewal: Daily".to_string(),
            format!("x:{}", sub["id"])
        )]
    );
    // Buying again while subscribed is refused kindly.
    let again = send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    assert!(
        again["text"]
            .as_str()
            .unwrap()
            .starts_with("You are subscribed to «Daily»"),
        "{again}"
    );

    // The buyer cancels: Telegram is told through the outbox, access stays until expiry.
    fake.clear_calls();
    let reply = send(&app, &button_update(&buyer, &format!("x:{}", sub["id"]))).await;
    assert_answer(
        &reply,
        "Renewal cancelled. Your access stays until it expires.",
    );
    let again = send(&app, &button_update(&buyer, &format!("x:{}", sub["id"]))).await;
    assert_answer(&again, "This subscription's renewal is already cancelled.");
    run(&app).await;
    let edits = fake.calls_of("editUserStarSubscription");
    assert_eq!(edits.len(), 1);
    assert_eq!(
        edits[0].params,
        json!({"user_id": 7005, "telegram_payment_charge_id": "sub-1", "is_canceled": true})
    );
    assert!(fake.subscription_cancelled(7005, "sub-1"));
    // The confirmation may be paced behind the renewals' receipts to this buyer: send
    // everything out.
    crate::support::effects::run_until_done(&app).await;
    assert!(
        messages_to(&fake, 7005)
            .iter()
            .any(|m| m.contains("will not renew")),
        "{:?}",
        messages_to(&fake, 7005)
    );
    assert_eq!(
        membership_of(&app, 7005, c).await.unwrap(),
        ("active".into(), expiry)
    );
    let sub_row = app
        .get(&format!("/api/star-subscriptions/{}", sub["id"]))
        .await
        .expect(200);
    assert_eq!(
        (sub_row["status"].as_str(), sub_row["cancelled_by"].as_str()),
        (Some("cancelled"), Some("buyer"))
    );

    // Every message so far is out (a message paced behind another to this buyer may still
    // wait a moment).
    crate::support::effects::run_until_done(&app).await;
    // A renewal charge after the cancellation is reviewed, never applied or refunded.
    send(
        &app,
        &payment_update("sub-4", 7005, &reference, 250, Some((false, now))),
    )
    .await;
    assert_eq!(
        payment(&app, "sub-4").await,
        (
            "needs_review".into(),
            Some("subscription_cancelled".into()),
            true
        )
    );
    assert_eq!(membership_of(&app, 7005, c).await.unwrap().1, expiry);
    // … and the buyer is told, once.
    fake.clear_calls();
    run(&app).await;
    let told = messages_to(&fake, 7005);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].contains("We will review it"), "{told:?}");
}

#[tokio::test]
async fn renewals_of_unknown_subscriptions_are_reviewed_and_staff_can_cancel() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    // A one-off Stars order, paid: a "renewal" of it names no subscription.
    let c = stars_channel(&app, -100_200_006, json!({})).await;
    let buyer = person(7006);
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    let (_, reference, _) = orders_of(&app, 7006, c).await[0].clone();
    send(&app, &payment_update("one-1", 7006, &reference, 250, None)).await;
    let before = membership_of(&app, 7006, c).await.unwrap();
    let in_a_month = Utc::now() + Duration::days(30);
    send(
        &app,
        &payment_update("one-2", 7006, &reference, 250, Some((false, in_a_month))),
    )
    .await;
    assert_eq!(
        payment(&app, "one-2").await,
        (
            "needs_review".into(),
            Some("unknown_subscription".into()),
            true
        )
    );
    // An unknown payload is reviewed too.
    send(
        &app,
        &payment_update("one-3", 7006, "ord_nope", 250, Some((false, in_a_month))),
    )
    .await;
    assert_eq!(payment(&app, "one-3").await.0, "needs_review");
    assert_eq!(membership_of(&app, 7006, c).await.unwrap(), before);

    // Staff cancel a subscription: 200, then 409; the effect is enqueued once.
    let r = stars_channel(&app, -100_200_007, json!({"recurring": true})).await;
    send(&app, &button_update(&buyer, &format!("b:{r}"))).await;
    let (_, reference, _) = orders_of(&app, 7006, r).await[0].clone();
    send(
        &app,
        &payment_update("rec-1", 7006, &reference, 250, Some((true, in_a_month))),
    )
    .await;
    let sub = app
        .get(&format!("/api/star-subscriptions?channel_id={r}"))
        .await
        .expect(200)["items"][0]
        .clone();
    let cancelled = app
        .post(
            &format!("/api/star-subscriptions/{}/cancel", sub["id"]),
            Value::Null,
        )
        .await
        .expect(200);
    assert_eq!(
        (
            cancelled["status"].as_str(),
            cancelled["cancelled_by"].as_str()
        ),
        (Some("cancelled"), Some("staff"))
    );
    app.post(
        &format!("/api/star-subscriptions/{}/cancel", sub["id"]),
        Value::Null,
    )
    .await
    .expect(409);
    app.post("/api/star-subscriptions/999999/cancel", Value::Null)
        .await
        .expect(404);
    app.get("/api/star-subscriptions?status=nope")
        .await
        .expect(422);
    assert_eq!(pending(&app, "subscription_cancel").await, 1);
    // The buyer's messages (grants, notices) share one chat's pace of one per second: a run
    // may leave some of them rate-limited for a moment. Runs until the cancellation is made.
    for _ in 0..5 {
        run(&app).await;
        if fake.subscription_cancelled(7006, "rec-1") {
            break;
        }
        crate::support::effects::make_due(&app).await;
    }
    assert!(fake.subscription_cancelled(7006, "rec-1"));
    // The member keeps access until expiry.
    assert_eq!(membership_of(&app, 7006, r).await.unwrap().0, "active");
}

#[tokio::test]
async fn charges_found_only_by_the_reconcile_start_and_renew_subscriptions() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_200_019, json!({"recurring": true})).await;

    // Buyer A's first charge came by webhook (a month ago: its subscription renews now); the
    // renewal's update never arrived.
    send(&app, &button_update(&person(7019), &format!("b:{c}"))).await;
    let (_, ref_a, _) = orders_of(&app, 7019, c).await[0].clone();
    send(
        &app,
        &payment_update("rc-a1", 7019, &ref_a, 250, Some((true, Utc::now()))),
    )
    .await;
    let (_, before) = membership_of(&app, 7019, c).await.unwrap();
    fake.add_incoming_payment("rc-a2", 7019, &ref_a, 250);

    // Buyer B's first charge is known only from the transaction list.
    send(&app, &button_update(&person(7020), &format!("b:{c}"))).await;
    let (_, ref_b, _) = orders_of(&app, 7020, c).await[0].clone();
    fake.add_incoming_payment("rc-b1", 7020, &ref_b, 250);

    let report = recovery::reconcile(&app.state.db, &app.state.config)
        .await
        .unwrap();
    assert_eq!(report.payments_recovered, 2, "{report:?}");
    // A renewal, never a refund of an "already paid" order.
    assert_eq!(payment(&app, "rc-a2").await, ("applied".into(), None, true));
    assert_eq!(
        membership_of(&app, 7019, c).await.unwrap().1,
        before + Duration::days(30)
    );
    // B's payment started a subscription, so B's renewals will be recognized too.
    assert_eq!(
        payment(&app, "rc-b1").await,
        ("applied".into(), None, false)
    );
    let subs = app
        .get(&format!("/api/star-subscriptions?channel_id={c}"))
        .await
        .expect(200);
    let charges: Vec<&str> = subs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["charge_id"].as_str().unwrap())
        .collect();
    assert_eq!(charges, ["rc-a1", "rc-b1"]);
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
        ("applied".into(), None, false)
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
        let barrier = Arc::new(Barrier::new(2));
        let tasks: Vec<_> = users
            .iter()
            .map(|&u| {
                let (app, barrier) = (app.clone(), barrier.clone());
                let press = button_update(&person(u), &format!("b:{c}"));
                tokio::spawn(async move {
                    barrier.wait().await;
                    (u, send(&app, &press).await)
                })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
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
        let held = one_i64(
            &app,
            "SELECT count(*) FROM orders WHERE channel_id = $1 AND status = 'pending'
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
        let barrier = Arc::new(Barrier::new(2));
        let mut tasks = Vec::new();
        for &u in &users {
            let (_, reference, _) = orders_of(&app, u, c).await[0].clone();
            let (app, barrier) = (app.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let update = pre_checkout_update(&format!("race-{u}"), u, &reference, 250);
                barrier.wait().await;
                (u, reference, send(&app, &update).await)
            }));
        }
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        let approved: Vec<_> = answers.iter().filter(|(_, _, a)| a["ok"] == true).collect();
        assert_eq!(approved.len(), 1, "round {round}: {answers:?}");
        let (winner, reference, _) = approved[0];
        send(
            &app,
            &payment_update(&format!("race-ch-{winner}"), *winner, reference, 250, None),
        )
        .await;
        let members = one_i64(
            &app,
            "SELECT count(*) FROM memberships WHERE channel_id = $1 AND status = 'active'",
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

// ---- what the buyer is told ----

#[tokio::test]
async fn a_refused_payment_is_explained_to_the_buyer_once() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_200_010, json!({"title": "Twice"})).await;
    let buyer = person(7010);
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    let (_, reference, _) = orders_of(&app, 7010, c).await[0].clone();
    send(&app, &payment_update("tw-1", 7010, &reference, 250, None)).await;
    let second = payment_update("tw-2", 7010, &reference, 250, None);
    send(&app, &second).await;
    send(&app, &second).await;
    assert_eq!(payment(&app, "tw-2").await.0, "refund_pending");
    run(&app).await;
    let told: Vec<String> = messages_to(&fake, 7010)
        .into_iter()
        .filter(|m| m.contains("refunded"))
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].contains("«Twice»") && told[0].contains("250 ⭐"),
        "{told:?}"
    );
    assert!(fake.was_refunded("tw-2"));
}

// ---- pages ----

#[tokio::test]
async fn more_channels_come_on_a_second_page() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(stars_channel(&app, -100_500_000 - i, json!({"title": format!("Ch {i}")})).await);
    }
    let buyer = person(7011);
    let first = send(&app, &text_update(&buyer, "/help")).await;
    let b = buttons(&first);
    assert_eq!(b.len(), 11, "{b:?}");
    assert_eq!(
        b[10],
        ("More channels ›".to_string(), format!("l:{}", ids[9]))
    );
    let reply = send(&app, &button_update(&buyer, &format!("l:{}", ids[9]))).await;
    assert_eq!(reply["method"], "answerCallbackQuery");
    run(&app).await;
    let page = &fake.calls_of("sendMessage")[0].params;
    let b = buttons(page);
    assert_eq!(
        b.iter().map(|(_, d)| d.clone()).collect::<Vec<_>>(),
        [format!("b:{}", ids[10]), format!("b:{}", ids[11])]
    );
    assert!(page["text"].as_str().unwrap().contains("Ch 11"));
}

// ---- bad input ----

#[tokio::test]
async fn bad_input_gets_a_sensible_reply_or_is_ignored_never_a_5xx() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let open = stars_channel(&app, -100_200_012, json!({"title": "🔥🔥🔥"})).await;
    let closed = stars_channel(&app, -100_200_013, json!({"active": false})).await;
    let buyer = person(7012);

    // Forged, foreign or stale button data.
    for data in [
        "b:abc".to_string(),
        "zz".to_string(),
        "b:99999".to_string(),
        "x:99999".to_string(),
        "l:0".to_string(),
        format!("b:{open}{}", "0".repeat(60)),
        "b:1\u{0}".to_string(),
    ] {
        let reply = send(&app, &button_update(&buyer, &data)).await;
        assert_answer(&reply, INVALID);
    }
    let mut no_data = button_update(&buyer, "b:1");
    no_data["callback_query"]
        .as_object_mut()
        .unwrap()
        .remove("data");
    assert_answer(&send(&app, &no_data).await, INVALID);
    let inactive = send(&app, &button_update(&buyer, &format!("b:{closed}"))).await;
    assert_answer(
        &inactive,
        "Sorry, this channel is not available any more. Send /start to see the channels.",
    );

    // Deep links to an unknown or inactive channel: a polite refusal and the list.
    for payload in [
        "c99999".to_string(),
        format!("c{closed}"),
        "nonsense".to_string(),
    ] {
        let reply = send(&app, &text_update(&buyer, &format!("/start {payload}"))).await;
        let text = reply["text"].as_str().unwrap();
        assert_eq!(
            text.starts_with(UNKNOWN_CHANNEL),
            payload != "nonsense",
            "{text}"
        );
        assert_eq!(
            buttons(&reply),
            [("Buy: 🔥🔥🔥 · 250 ⭐".to_string(), format!("b:{open}"))]
        );
    }
    // Any other text gets the help.
    let reply = send(&app, &text_update(&buyer, "hello?")).await;
    assert!(
        reply["text"].as_str().unwrap().contains("/subscriptions"),
        "{reply}"
    );

    // A bot, a channel post, a group message, a message on behalf of a channel: ignored.
    let bot = json!({"id": 7099, "is_bot": true, "first_name": "Bot"});
    assert_eq!(send(&app, &text_update(&bot, "/start")).await, json!({}));
    assert_eq!(
        send(&app, &button_update(&bot, &format!("b:{open}"))).await,
        json!({})
    );
    let post = json!({"update_id": next_id(), "channel_post": {"message_id": 1, "date": 0,
        "chat": {"id": -100_200_012, "type": "channel"}, "text": "/start"}});
    assert_eq!(send(&app, &post).await, json!({}));
    let mut group = text_update(&buyer, "/start");
    group["message"]["chat"] = json!({"id": -42, "type": "group"});
    assert_eq!(send(&app, &group).await, json!({}));
    let mut anonymous = text_update(&buyer, "/start");
    anonymous["message"].as_object_mut().unwrap().remove("from");
    anonymous["message"]["sender_chat"] = json!({"id": -1_001, "type": "channel"});
    assert_eq!(send(&app, &anonymous).await, json!({}));
    let mut forged_id = text_update(&json!({"id": -5, "first_name": "X"}), "/start");
    forged_id["message"]["chat"]["id"] = json!(-5);
    assert_eq!(send(&app, &forged_id).await, json!({}));
    assert!(fake.calls().is_empty());

    // A user without a username (or last name) buys like anyone; an emoji-only title fits.
    let plain = json!({"id": 7013, "is_bot": false, "first_name": "Bo"});
    assert_answer(
        &send(&app, &button_update(&plain, &format!("b:{open}"))).await,
        ON_ITS_WAY,
    );
    let row = app
        .db()
        .await
        .query_one(
            "SELECT username, display_name FROM subscribers WHERE telegram_user_id = 7013",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, Option<String>>(0),
            row.get::<_, Option<String>>(1)
        ),
        (None, Some("Bo".to_string()))
    );
    run(&app).await;
    let invoice = &fake.calls_of("sendInvoice")[0].params;
    assert_eq!(invoice["title"], "🔥🔥🔥");
    assert_eq!(invoice["description"], "30 days of access to «🔥🔥🔥».");
}

#[tokio::test]
async fn the_longest_titles_and_descriptions_respect_telegrams_limits() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let title = "👨\u{200D}👩\u{200D}👧".repeat(31) + "x";
    assert_eq!(title.chars().count(), 5 * 31 + 1);
    let long = "🔥".repeat(1000);
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(
            stars_channel(
                &app,
                -100_600_000 - i,
                json!({"title": title, "description": long}),
            )
            .await,
        );
    }
    let utf16 = |s: &str| s.encode_utf16().count();
    let buyer = person(7014);
    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert!(utf16(reply["text"].as_str().unwrap()) <= 4096);
    for (text, data) in buttons(&reply) {
        assert!(data.len() <= 64 && utf16(&text) <= 64, "{text} {data}");
    }
    let reply = send(&app, &text_update(&buyer, &format!("/start c{}", ids[0]))).await;
    assert!(utf16(reply["text"].as_str().unwrap()) <= 4096);
    send(&app, &button_update(&buyer, &format!("b:{}", ids[0]))).await;
    run(&app).await;
    let invoice = &fake.calls_of("sendInvoice")[0].params;
    let (t, d) = (
        invoice["title"].as_str().unwrap(),
        invoice["description"].as_str().unwrap(),
    );
    assert!(
        !t.is_empty() && utf16(t) <= 32 && !t.contains("\u{200D}…"),
        "{t}"
    );
    assert!(!d.is_empty() && utf16(d) <= 255, "{d}");
    let label = invoice["prices"][0]["label"].as_str().unwrap();
    assert!(utf16(label) <= 32);
}

// ---- channels and dry run ----

#[tokio::test]
async fn channels_carry_description_recurring_and_buy_link() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = app
        .create_channel(
            -100_200_015,
            json!({"description": "About", "currency": "XTR", "price_minor": 5, "recurring": true}),
        )
        .await;
    let id = c["id"].as_i64().unwrap();
    assert_eq!(c["description"], "About");
    assert_eq!(c["recurring"], true);
    assert_eq!(c["buy_link"], format!("https://t.me/{BOT}?start=c{id}"));
    let listed = app.get("/api/channels").await.expect(200);
    assert_eq!(listed["items"][0]["buy_link"], c["buy_link"]);

    // Recurring is for XTR and 30 days only, however it is reached.
    let refused = app
        .post(
            "/api/channels",
            json!({"telegram_chat_id": -100_200_016, "title": "T",
            "price_minor": 5, "currency": "UAH", "billing_period_days": 30, "recurring": true}),
        )
        .await
        .expect(422);
    assert!(refused["errors"]["recurring"].is_string(), "{refused}");
    for patch in [
        json!({"currency": "UAH"}),
        json!({"billing_period_days": 7}),
    ] {
        let r = app
            .patch(&format!("/api/channels/{id}"), patch)
            .await
            .expect(422);
        assert!(r["errors"]["recurring"].is_string(), "{r}");
    }
    let cleared = app
        .patch(
            &format!("/api/channels/{id}"),
            json!({"description": null, "recurring": false}),
        )
        .await
        .expect(200);
    assert_eq!(
        (cleared["description"].clone(), cleared["recurring"].clone()),
        (Value::Null, json!(false))
    );
    let r = app
        .patch(
            &format!("/api/channels/{id}"),
            json!({"description": "x".repeat(1001)}),
        )
        .await
        .expect(422);
    assert!(r["errors"]["description"].is_string());
    app.patch(&format!("/api/channels/{id}"), json!({"recurring": null}))
        .await
        .expect(422);

    // Without TELEGRAM_BOT_USERNAME there is no buy link.
    let plain = TestApp::spawn().await;
    let c = plain.create_channel(-100_200_017, json!({})).await;
    assert_eq!(c["buy_link"], Value::Null);
    assert_eq!(c["description"], Value::Null);
    assert_eq!(c["recurring"], false);
}

#[tokio::test]
async fn in_dry_run_the_invoice_is_logged_not_sent() {
    let app = TestApp::spawn_with(|env| {
        env.insert("TELEGRAM_DRY_RUN".into(), "true".into());
    })
    .await;
    let c = stars_channel(&app, -100_200_018, json!({"recurring": true})).await;
    send(&app, &button_update(&person(7018), &format!("b:{c}"))).await;
    let report = run(&app).await;
    assert_eq!(report.done, 1, "{report:?}");
    let link: Option<String> = app
        .db()
        .await
        .query_one("SELECT invoice_link FROM orders", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(link, None, "a dry run's stand-in link is not stored");
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

/// Moves the order's hold back so that it ran out `secs_ago` seconds ago; returns when.
async fn expire_hold(app: &TestApp, order_id: i64, secs_ago: i64) -> DateTime<Utc> {
    app.db()
        .await
        .query_one(
            "UPDATE orders SET hold_until = statement_timestamp() - make_interval(secs => $2)
             WHERE id = $1 AND hold_until IS NOT NULL RETURNING hold_until",
            &[&order_id, &(secs_ago as f64)],
        )
        .await
        .expect("the order has a hold to expire")
        .get(0)
}

/// `(status, superseded)` of an order.
async fn order_state(app: &TestApp, order_id: i64) -> (String, bool) {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT status, superseded_at IS NOT NULL FROM orders WHERE id = $1",
            &[&order_id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

/// Holds ever granted to Telegram user `user` on `channel`.
async fn holds_of(app: &TestApp, user: i64, channel: i64) -> i64 {
    one_i64(
        app,
        "SELECT count(*) FROM orders o JOIN subscribers s ON s.id = o.subscriber_id
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
    assert_eq!(order_state(&app, old_id).await, ("pending".into(), true));
    assert_eq!(
        order_state(&app, orders[1].0).await,
        ("pending".into(), false)
    );
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
        ("applied".into(), None, false)
    );
    assert_eq!(membership_of(&app, 7601, c).await.unwrap().0, "active");
    assert_eq!(order_state(&app, old_id).await, ("paid".into(), true));
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
    assert_eq!(order_state(&app, old_id).await, ("pending".into(), true));
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
        ("refund_pending".into(), Some("hold_expired".into()), false)
    );
    assert!(membership_of(&app, 7602, c).await.is_none());
    // The other buyer's seat is intact, and the buyer's new order finds the channel full.
    send(
        &app,
        &payment_update("ch-sup-3", 7603, &other_ref, 250, None),
    )
    .await;
    assert_eq!(payment(&app, "ch-sup-3").await.0, "applied");
    let refused = send(&app, &pre_checkout_update("q-sup-4", 7602, &new_ref, 250)).await;
    assert_eq!(refused["ok"], false, "{refused}");
    let taken = one_i64(
        &app,
        "SELECT count(*) FROM memberships WHERE channel_id = $1 AND status = 'active'",
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
    assert_eq!(order_state(&app, old_id).await, ("pending".into(), true));
    let body = wayforpay_callback(&old_ref, "199.00", "UAH", "Approved");
    assert_wayforpay_accept(&app.post_wayforpay(&body).await.expect(200), &old_ref);
    assert_eq!(
        payment(&app, &old_ref).await,
        ("applied".into(), None, false)
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
    assert_eq!(order_state(&app, old_id).await, ("pending".into(), true));
    let body = wayforpay_callback(&old_ref, "199.00", "UAH", "Approved");
    assert_wayforpay_accept(&app.post_wayforpay(&body).await.expect(200), &old_ref);
    assert_eq!(
        payment(&app, &old_ref).await,
        ("needs_review".into(), Some("hold_expired".into()), false)
    );
    // One seat counted for the buyer, by the new order's hold; the old order counts none.
    let held = one_i64(
        &app,
        "SELECT count(*) FROM orders WHERE channel_id = $1 AND status = 'pending'
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
    assert_eq!(payment(&app, &orders[1].1).await.0, "applied");
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
            let barrier = Arc::new(Barrier::new(n));
            (0..n)
                .map(|_| {
                    let (app, barrier) = (app.clone(), barrier.clone());
                    let press = button_update(&buyer, &format!("b:{c}"));
                    tokio::spawn(async move {
                        barrier.wait().await;
                        send(&app, &press).await["text"]
                            .as_str()
                            .unwrap()
                            .to_string()
                    })
                })
                .collect::<Vec<_>>()
        };
        // A first hold, run out a second ago: every press at once is held back by the cooldown.
        assert_answer(
            &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
            ON_ITS_WAY,
        );
        let first = orders_of(&app, user, c).await[0].0;
        expire_hold(&app, first, 1).await;
        for t in presses(4) {
            let a = t.await.unwrap();
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
        let mut answers = Vec::new();
        for t in presses(4) {
            answers.push(t.await.unwrap());
        }
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
        let mut answers = Vec::new();
        for t in presses(4) {
            answers.push(t.await.unwrap());
        }
        for a in &answers {
            assert!(
                a.starts_with("You have held a seat on «Capped» several times today")
                    && a.contains("You can try again after"),
                "round {round}: {a}"
            );
        }
        assert_eq!(holds_of(&app, user, c).await, 3, "round {round}");
        let pending_now = one_i64(
            &app,
            "SELECT count(*) FROM orders o JOIN subscribers s ON s.id = o.subscriber_id
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
        let barrier = Arc::new(Barrier::new(4));
        let tasks: Vec<_> = references
            .iter()
            .enumerate()
            .map(|(i, reference)| {
                let (app, barrier) = (app.clone(), barrier.clone());
                let update =
                    pre_checkout_update(&format!("cap-{round}-r{i}"), user, reference, 250);
                tokio::spawn(async move {
                    barrier.wait().await;
                    send(&app, &update).await
                })
            })
            .collect();
        let mut approved = 0;
        for t in tasks {
            let a = t.await.unwrap();
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
        let holds = one_i64(
            &app,
            "SELECT count(*) FROM orders WHERE subscriber_id = $1 AND held_at IS NOT NULL",
            &[&(subscriber as i32)],
        )
        .await;
        assert_eq!(holds, 3, "round {round}");
        let refused = one_i64(
            &app,
            "SELECT count(*) FROM pre_checkout_decisions
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
        ("needs_review".into(), Some("hold_expired".into()), false)
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
