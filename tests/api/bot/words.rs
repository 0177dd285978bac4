//! What the bot says, and only what follows: `/code` for a code the buyer's pending order holds
//! says it is applied, with the price; access nobody paid for (a trial, a 100 % code, a staff
//! grant or correction) is not thanked for as a payment, and a trial's answer names its channel;
//! a buyer whose access ends is told once, with a renew button — never someone who was never
//! told anything, nor someone who is a member again; and with holds under a minute a card press
//! says card payment is not available instead of promising a page that never comes (and the
//! start-up log warns about that configuration).
//!
//! Messages are read from the fake Bot API ([`FakeBot`]), in the buyer's language.

use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::{
    bot::conversation::{
        ALREADY_SENT, ON_ITS_WAY, app_with, assert_answer, button_update, buttons, channel,
        messages_to, person, send, stars_channel, text_update,
    },
    support::{
        effects::run_until_done,
        fake_bot::{FakeBot, TOKEN},
        helpers::{JWT_SECRET, NewPlan, TestApp, WAYFORPAY_ACCOUNT, WAYFORPAY_KEY, id, url_for},
    },
};

/// A promo code of `percent_off` for every paid plan (one use per buyer); returns its id.
async fn promo(app: &TestApp, code: &str, percent_off: i32) -> i64 {
    app.db()
        .await
        .query_one(
            "INSERT INTO promo_codes (code, percent_off) VALUES ($1, $2) RETURNING id",
            &[&code, &percent_off],
        )
        .await
        .unwrap()
        .get("id")
}

fn text(reply: &Value) -> &str {
    reply["text"].as_str().unwrap()
}

/// The `sendMessage` calls to `user`: `(text, buttons)`.
fn sent_to(fake: &FakeBot, user: i64) -> Vec<(String, Vec<(String, String)>)> {
    fake.calls_of("sendMessage")
        .into_iter()
        .filter(|c| c.params["chat_id"] == user)
        .map(|c| {
            (
                c.params["text"].as_str().unwrap().to_string(),
                buttons(&c.params),
            )
        })
        .collect()
}

/// The orders of Telegram user `user`.
async fn orders_of(app: &TestApp, user: i64) -> i64 {
    app.count(&format!(
        "orders o JOIN subscribers s ON s.id = o.subscriber_id WHERE s.telegram_user_id = {user}"
    ))
    .await
}

// ---- /code ----

#[tokio::test]
async fn a_code_the_pending_order_holds_is_said_applied_with_its_price() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_713_001, json!({"title": "Held"})).await;
    promo(&app, "ONCE25", 25).await;

    let buyer = person(7_130_001);
    send(&app, &text_update(&buyer, "/code ONCE25")).await;
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ON_ITS_WAY,
    );
    // The order holds the code's one use for this buyer: the code is applied, not used up.
    let reply = send(&app, &text_update(&buyer, "/code once25")).await;
    assert_eq!(
        text(&reply),
        "Code ONCE25 is already applied to your order of «Held»: 188 ⭐ instead of 250 ⭐. \
         Its invoice is in the chat above."
    );
    assert_eq!(app.count("bot_promo_codes").await, 0, "nothing kept again");
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ALREADY_SENT,
    );
    assert_eq!(orders_of(&app, 7_130_001).await, 1);

    // In the buyer's language.
    let olha = json!({"id": 7_130_002, "is_bot": false, "first_name": "Оля",
                      "language_code": "uk"});
    send(&app, &text_update(&olha, "/code ONCE25")).await;
    send(&app, &button_update(&olha, &format!("b:{c}"))).await;
    let reply = send(&app, &text_update(&olha, "/code ONCE25")).await;
    assert_eq!(
        text(&reply),
        "Код ONCE25 уже застосовано до вашого замовлення «Held»: 188 ⭐ замість 250 ⭐. \
         Рахунок — у чаті вище."
    );
}

// ---- access nobody paid for ----

#[tokio::test]
async fn a_trial_is_confirmed_as_a_trial_naming_its_channel() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_713_011, json!({"title": "Tasting"})).await;
    let trial = app
        .insert_plan(
            NewPlan {
                title: "Taster",
                kind: "trial",
                price_minor: 0,
                currency: "XTR",
                period_days: Some(7),
                position: 0,
            },
            &[c],
        )
        .await;
    let buyer = person(7_130_011);
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("p:{trial}"))).await,
        "Done! Your free access to «Tasting» has started. Your join link is on its way.",
    );
    run_until_done(&app).await;
    let sent = messages_to(&fake, 7_130_011);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        sent[0].starts_with("Your free trial of «Tasting» has started: your access lasts until "),
        "{sent:?}"
    );
    assert!(sent[0].contains("Join here: "), "{sent:?}");
    assert!(!sent[0].contains("Payment"), "{sent:?}");
}

#[tokio::test]
async fn a_hundred_percent_code_is_not_thanked_for_as_a_payment() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_713_021, json!({"title": "Gift"})).await;
    promo(&app, "GIFT", 100).await;
    let buyer = person(7_130_021);
    send(&app, &text_update(&buyer, "/code gift")).await;
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        "Done! Your free access to «Gift» has started. Your join link is on its way.",
    );
    run_until_done(&app).await;
    let sent = messages_to(&fake, 7_130_021);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        sent[0].starts_with("Your free access to «Gift» is active until "),
        "{sent:?}"
    );
    assert!(!sent[0].contains("Payment"), "{sent:?}");
}

#[tokio::test]
async fn staff_grants_and_corrections_are_not_thanked_for_as_payments() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = channel(&app, -100_713_031, json!({"title": "Staffed"})).await;
    let user = 7_130_031;
    let s = id(&app.create_subscriber(user).await);

    let m = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": s, "channel_id": c, "days": 10}),
        )
        .await
        .expect(201);
    run_until_done(&app).await;
    let sent = messages_to(&fake, user);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        sent[0].starts_with("You have been given access to «Staffed» until "),
        "{sent:?}"
    );
    assert!(sent[0].contains("Join here: "), "{sent:?}");

    // A staff grant to a member extends: not a payment either.
    app.post(
        "/api/memberships",
        json!({"subscriber_id": s, "channel_id": c, "days": 5}),
    )
    .await
    .expect(200);
    // A staff correction moving the expiry later.
    let later = (chrono::Utc::now() + chrono::Duration::days(90)).to_rfc3339();
    app.patch(
        &format!("/api/memberships/{}", id(&m)),
        json!({"expires_at": later}),
    )
    .await
    .expect(200);
    run_until_done(&app).await;
    let sent = messages_to(&fake, user);
    assert_eq!(sent.len(), 3, "{sent:?}");
    for extended in &sent[1..] {
        assert!(
            extended.starts_with("Your access to «Staffed» has been extended until "),
            "{sent:?}"
        );
    }

    // Ended by staff and made active again by a correction: given again, not paid for.
    app.patch(
        &format!("/api/memberships/{}", id(&m)),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);
    app.patch(
        &format!("/api/memberships/{}", id(&m)),
        json!({"status": "active"}),
    )
    .await
    .expect(200);
    run_until_done(&app).await;
    let sent = messages_to(&fake, user);
    assert!(
        sent.iter()
            .all(|m| !m.contains("Payment received") && !m.contains("thank you")),
        "{sent:?}"
    );
    assert!(
        sent.last()
            .unwrap()
            .starts_with("You have been given access to «Staffed» until "),
        "{sent:?}"
    );

    // A payment is still thanked for.
    let order = app.create_order(s, c).await;
    app.pay_order(&order, "pay_botwords_1").await.expect(200);
    run_until_done(&app).await;
    let sent = messages_to(&fake, user);
    assert!(
        sent.last()
            .unwrap()
            .starts_with("Payment received, thank you! Your access to «Staffed» now lasts until "),
        "{sent:?}"
    );
}

// ---- the end of access ----

/// A staff grant of `days` to Telegram user `user` in `c`, its join link delivered; returns the
/// membership's id.
async fn granted(app: &TestApp, user: i64, c: i64, days: i64) -> i64 {
    let s = app
        .db()
        .await
        .query_one(
            "INSERT INTO subscribers (telegram_user_id) VALUES ($1)
             ON CONFLICT (telegram_user_id) DO UPDATE SET username = subscribers.username
             RETURNING id",
            &[&user],
        )
        .await
        .unwrap()
        .get::<_, i32>("id");
    let r = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": s, "channel_id": c, "days": days}),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.status);
    run_until_done(app).await;
    id(&r.json())
}

#[tokio::test]
async fn a_buyer_whose_access_ends_is_told_once_with_a_renew_button() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -100_713_041;
    let c = stars_channel(&app, chat, json!({"title": "Ending"})).await;

    // Ended by staff.
    let (ann, bob, olha) = (7_130_041, 7_130_042, 7_130_043);
    let m = granted(&app, ann, c, 10).await;
    fake.add_member(chat, ann);
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);
    run_until_done(&app).await;
    assert!(!fake.is_member(chat, ann), "removed");
    let sent = sent_to(&fake, ann);
    assert_eq!(sent.len(), 2, "the join link, then the end: {sent:?}");
    assert_eq!(sent[1].0, "Your access to «Ending» has been ended.");
    assert_eq!(sent[1].1, vec![("Renew: Ending".into(), format!("b:{c}"))]);

    // Expired by the sweep; in the buyer's language.
    let m = granted(&app, olha, c, 10).await;
    app.db()
        .await
        .execute(
            "UPDATE subscribers SET language = 'uk' WHERE telegram_user_id = $1",
            &[&olha],
        )
        .await
        .unwrap();
    let past = (chrono::Utc::now() - chrono::Duration::minutes(1)).to_rfc3339();
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"expires_at": past}),
    )
    .await
    .expect(200);
    app.post("/api/sweep", Value::Null).await.expect(200);
    run_until_done(&app).await;
    let sent = sent_to(&fake, olha);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(
        sent[1].0,
        "Ваш доступ до «Ending» закінчився. Продовжте його, щоб повернутися."
    );
    assert_eq!(
        sent[1].1,
        vec![("Продовжити: Ending".into(), format!("b:{c}"))]
    );

    // Once per ending: later runs send nothing more.
    run_until_done(&app).await;
    assert_eq!(sent_to(&fake, ann).len(), 2);
    assert_eq!(sent_to(&fake, olha).len(), 2);

    // A member again before the removal was made: neither removed nor told.
    let m = granted(&app, bob, c, 10).await;
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"status": "active"}),
    )
    .await
    .expect(200);
    run_until_done(&app).await;
    let sent = sent_to(&fake, bob);
    assert!(sent.iter().all(|(t, _)| !t.contains("ended")), "{sent:?}");
}

#[tokio::test]
async fn nobody_is_told_of_an_end_they_were_never_told_the_start_of() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -100_713_051;
    let c = stars_channel(&app, chat, json!({"title": "Quiet"})).await;
    // Access whose join link was never delivered (the buyer never started the bot).
    let user = 7_130_051;
    fake.always(
        "sendMessage",
        crate::support::fake_bot::Reply::Error(
            403,
            "Forbidden: bot can't initiate conversation with a user".into(),
        ),
    );
    let s = id(&app.create_subscriber(user).await);
    let m = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": s, "channel_id": c, "days": 10}),
        )
        .await
        .expect(201);
    crate::support::effects::run(&app).await;
    assert_eq!(
        app.count("effects WHERE kind = 'grant' AND status = 'failed'")
            .await,
        1
    );
    fake.reset("sendMessage");
    fake.clear_calls();
    fake.add_member(chat, user);
    app.patch(
        &format!("/api/memberships/{}", id(&m)),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);
    run_until_done(&app).await;
    assert!(!fake.is_member(chat, user), "removed all the same");
    assert!(
        sent_to(&fake, user).is_empty(),
        "{:?}",
        sent_to(&fake, user)
    );

    // A stranger who joined without access is removed, never told.
    let stranger = 7_130_052;
    fake.add_member(chat, stranger);
    let found = json!({
        "update_id": crate::bot::conversation::next_id(),
        "chat_member": {
            "chat": {"id": chat, "type": "channel", "title": "Quiet"},
            "from": {"id": stranger, "is_bot": false, "first_name": "S"},
            "date": 1_700_000_300,
            "old_chat_member": {"status": "left", "user": {"id": stranger, "is_bot": false, "first_name": "S"}},
            "new_chat_member": {"status": "member", "user": {"id": stranger, "is_bot": false, "first_name": "S"}}
        }
    });
    app.post_telegram_update(found).await.expect(200);
    run_until_done(&app).await;
    assert!(!fake.is_member(chat, stranger));
    assert!(sent_to(&fake, stranger).is_empty());
}

// ---- card pages and holds under a minute ----

#[tokio::test]
async fn with_holds_under_a_minute_a_card_press_says_card_payment_is_not_available() {
    let fake = FakeBot::start().await;
    let url = fake.url.clone();
    let app = TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
        env.insert(
            "TELEGRAM_BOT_USERNAME".into(),
            crate::bot::conversation::BOT.into(),
        );
        env.insert(
            "PUBLIC_URL".into(),
            crate::bot::conversation::PUBLIC_URL.into(),
        );
        env.insert("HOLD_SECS".into(), "30".into());
    })
    .await;
    let card = channel(&app, -100_713_061, json!({"title": "Card"})).await;
    let stars = stars_channel(&app, -100_713_062, json!({"title": "Stars"})).await;
    let buyer = person(7_130_061);
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{card}"))).await,
        "Sorry, card payment for «Card» is not available right now. Please try again later.",
    );
    assert_eq!(orders_of(&app, 7_130_061).await, 0, "no order");
    assert_eq!(app.count("effects WHERE kind = 'invoice'").await, 0);
    // Stars are not held up by it.
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{stars}"))).await,
        ON_ITS_WAY,
    );
    run_until_done(&app).await;
    assert_eq!(fake.calls_of("sendInvoice").len(), 1);
    assert!(messages_to(&fake, 7_130_061).is_empty());
}

/// Starts `subgate serve` with the test configuration plus `extra`, and returns what it logged
/// until it said "listening".
async fn serve_start_log(app: &TestApp, extra: &[(&str, &str)]) -> String {
    use std::io::{BufRead, BufReader};
    let url = url_for(&app.db_name);
    let extra: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_subgate"))
            .arg("serve")
            .env_clear()
            .env("DATABASE_URL", &url)
            .env("JWT_SECRET", JWT_SECRET)
            .env("BIND_ADDR", format!("127.0.0.1:{port}"))
            .env("LOG_FORMAT", "pretty")
            .env("WAYFORPAY_MERCHANT_ACCOUNT", WAYFORPAY_ACCOUNT)
            .env("WAYFORPAY_SECRET_KEY", WAYFORPAY_KEY)
            .env("HOLD_SECS", "30")
            // Nothing answers there: the worker's calls fail, which is not what is looked at.
            .env("TELEGRAM_API_URL", "http://127.0.0.1:9")
            .envs(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the subgate binary runs");
        let mut log = String::new();
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            log.push_str(&line);
            log.push('\n');
            if log.contains("listening") {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        log
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn start_up_warns_when_card_pages_could_not_stay_open_a_minute() {
    let app = TestApp::spawn().await;
    let sells_cards = [
        ("TELEGRAM_BOT_TOKEN", TOKEN),
        ("PUBLIC_URL", crate::bot::conversation::PUBLIC_URL),
    ];
    let log = serve_start_log(&app, &sells_cards).await;
    assert!(log.contains("listening"), "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("HOLD_SECS") && l.contains("card")),
        "{log}"
    );
    // A bot that sells no card plans (no PUBLIC_URL: no card page) has nothing to warn about.
    let log = serve_start_log(&app, &[("TELEGRAM_BOT_TOKEN", TOKEN)]).await;
    assert!(log.contains("listening"), "{log}");
    assert!(!log.contains("HOLD_SECS"), "{log}");
}

#[tokio::test]
async fn a_refund_at_the_gateway_ends_access_and_says_why() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -100_713_071;
    let c = channel(&app, chat, json!({"title": "Refunded"})).await;
    let user = 7_130_071;
    let s = id(&app.create_subscriber(user).await);
    app.db()
        .await
        .execute(
            "UPDATE subscribers SET language = 'ru' WHERE id = $1",
            &[&(s as i32)],
        )
        .await
        .unwrap();
    let order = app.create_order(s, c).await;
    let r = crate::support::helpers::reference(&order);
    let paid = crate::support::helpers::wayforpay_callback(&r, "199", "UAH", "Approved");
    app.post_wayforpay(&paid).await.expect(200);
    run_until_done(&app).await;
    fake.add_member(chat, user);
    let refunded = crate::support::helpers::wayforpay_callback(&r, "199", "UAH", "Refunded");
    app.post_wayforpay(&refunded).await.expect(200);
    run_until_done(&app).await;
    assert!(!fake.is_member(chat, user), "removed");
    let sent = sent_to(&fake, user);
    assert!(
        sent[0].0.starts_with("Оплата получена, спасибо!"),
        "{sent:?}"
    );
    let ended: Vec<_> = sent
        .iter()
        .filter(|(t, _)| t.contains("закончился"))
        .collect();
    assert_eq!(
        ended,
        [&(
            "Ваш доступ к «Refunded» закончился: оплата за него возвращена.".to_string(),
            vec![("Продлить: Refunded".to_string(), format!("b:{c}"))]
        )],
        "{sent:?}"
    );
}
