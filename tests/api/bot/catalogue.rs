//! What the bot shows and what it ignores: channels on a second page, bad input answered
//! sensibly or ignored (never a 5xx), the longest titles and descriptions within Telegram's
//! limits, a channel's description, recurring terms and buy link, and a dry run that logs the
//! invoice instead of sending it.

use serde_json::{Value, json};

use crate::{
    bot::conversation::{
        BOT, ON_ITS_WAY, app_with, assert_answer, button_update, buttons, next_id, person, run,
        send, stars_channel, text_update,
    },
    support::{fake_bot::FakeBot, helpers::TestApp},
};

const INVALID: &str = "This button is no longer valid. Send /start to see the channels and groups.";

const UNKNOWN_CHANNEL: &str = "Sorry, this channel or group is not available.";

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
        (
            "More channels and groups ›".to_string(),
            format!("l:{}", ids[9])
        )
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
        "Sorry, this channel or group is not available any more. Send /start to see the channels and groups.",
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
