//! The door in a real browser: a channel's door set to the Mini App paywall on its form (with
//! `PUBLIC_URL` set), its paywall URL shown with a Copy button and stored in the database;
//! without `PUBLIC_URL` the API's refusal next to the Door field, nothing stored; and the Door
//! screen listing the join requests waiting at a Mini App door (written here with SQL, as the
//! door records them) with the channel's title, how the door answered, the buyer and their
//! order, reached from the channel's page ("2 waiting at the door") and the navigation, and
//! filtered by state and by channel.

use futures::FutureExt;
use serde_json::json;

use crate::{
    console::{
        charts::keep,
        referrals::{finish, sign_in},
        walk::serve,
    },
    support::{
        browser::Browser,
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, TestApp, id},
    },
};

const PUBLIC_URL: &str = "https://pay.example.com";

/// A join request of Telegram user `user` at channel `channel`'s door, as the door records it:
/// answered `answer`, in `state` (decided an hour after it came, and told to Telegram, unless
/// it is waiting), for `order` when the Mini App made one.
async fn knock(
    app: &TestApp,
    channel: i64,
    user: i64,
    answer: &str,
    state: &str,
    order: Option<i64>,
) {
    let channel = i32::try_from(channel).unwrap();
    let chat: i64 = app
        .db()
        .await
        .query_one(
            "SELECT telegram_chat_id FROM channels WHERE id = $1",
            &[&channel],
        )
        .await
        .unwrap()
        .get(0);
    app.db()
        .await
        .execute(
            "INSERT INTO join_requests (channel_id, chat_id, user_id, query_id, reference, answer,
                                        state, order_id, requested_at, decided_at, answered_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7::text, $8, now() - interval '2 hours',
                     CASE WHEN $7::text = 'waiting' THEN NULL ELSE now() - interval '1 hour' END,
                     CASE WHEN $7::text = 'waiting' THEN NULL ELSE now() - interval '1 hour' END)",
            &[
                &channel,
                &chat,
                &user,
                &format!("query-{user}"),
                &format!("ref-{user}"),
                &answer,
                &state,
                &order,
            ],
        )
        .await
        .unwrap();
}

async fn door_of(app: &TestApp, channel: i64) -> String {
    app.db()
        .await
        .query_one(
            "SELECT door FROM channels WHERE id = $1",
            &[&i32::try_from(channel).unwrap()],
        )
        .await
        .unwrap()
        .get(0)
}

async fn value(browser: &Browser, css: &str) -> String {
    let el = browser.find(css).await;
    browser.value(&el).await
}

/// Goes to `hash` in the page (the session stays).
async fn open(browser: &Browser, hash: &str) {
    browser
        .execute("location.hash = arguments[0];", json!([hash]))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mini_app_door_is_set_on_the_form_and_its_waiting_requests_are_listed() {
    let app = TestApp::spawn_with(|env| {
        env.insert("PUBLIC_URL".into(), PUBLIC_URL.into());
    })
    .await;
    let channel = id(&app
        .create_channel(-1_001_000_090_001, json!({"title": "Night signals"}))
        .await);
    let other = id(&app
        .create_channel(-1_001_000_090_002, json!({"title": "Traders’ group"}))
        .await);
    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        sign_in(
            &browser,
            &base,
            &format!("#/channels/{channel}"),
            ADMIN_EMAIL,
            ADMIN_PASSWORD,
            "Channel: Night signals",
        )
        .await;
        // The bot's door by default; the paywall's address is known all the same.
        assert_eq!(value(&browser, "#channel-door").await, "bot");
        browser
            .wait_text(
                "#channel-door-fact",
                "Bot: members approved, others declined",
            )
            .await;
        let paywall = format!("{PUBLIC_URL}/app/?c={channel}");
        assert_eq!(value(&browser, "#channel-paywall-url").await, paywall);

        // The Mini App paywall, chosen on the form.
        browser.select("#channel-door", "Mini App paywall").await;
        browser.click("#channel button[type=submit]").await;
        browser.wait_text("#status", "Saved channel").await;
        browser
            .wait_text("#channel-door-fact", "Mini App paywall")
            .await;
        assert_eq!(door_of(&app, channel).await, "mini_app");
        assert_eq!(value(&browser, "#channel-door").await, "mini_app");
        let fact = browser
            .wait_text("#channel-door-fact", "0 waiting at the door")
            .await;
        assert!(fact.starts_with("Mini App paywall"), "{fact}");
        assert_eq!(value(&browser, "#channel-paywall-url").await, paywall);
        browser.click("button[aria-label='Copy Paywall URL']").await;
        browser
            .wait_text("#status", &format!("Copied: {paywall}"))
            .await;
        // The list marks the channel's door.
        open(&browser, "#/channels").await;
        let list = browser.wait_text("main table", "Night signals").await;
        assert!(list.contains("Mini App door"), "{list}");

        // Two wait at the door (one a buyer with an order, one queued), one was let in at once.
        let buyer = id(&app.create_subscriber(90_001).await);
        let order = id(&app.create_order(buyer, channel).await);
        knock(&app, channel, 90_001, "web_app", "waiting", Some(order)).await;
        knock(&app, channel, 90_002, "queue", "waiting", None).await;
        knock(&app, channel, 90_003, "approve", "approved", None).await;
        open(&browser, &format!("#/channels/{channel}")).await;
        browser
            .wait_text("#channel-door-fact", "2 waiting at the door")
            .await;
        keep(&browser, "19-channel-door.png", 1280).await;
        browser.click("#channel-door-waiting").await;
        browser.wait_text("main h1", "Door").await;
        let rows = browser
            .wait_text("#door-list table", "Mini App opened")
            .await;
        for shown in [
            "Night signals",
            "90001",
            &format!("Subscriber #{buyer}"),
            &format!("Order #{order}"),
            "90002",
            "not a subscriber yet",
            "Queued",
            "waiting",
        ] {
            assert!(rows.contains(shown), "{shown:?} in {rows}");
        }
        assert!(!rows.contains("90003"), "only those waiting: {rows}");
        let cell = browser
            .wait_text("#door-list td[data-label='Channel or group']", "")
            .await;
        assert_eq!(cell, "Night signals", "the channel by its title");
        // With `CONSOLE_SCREENSHOTS_DIR` set, the screen as a person sees it, at both widths.
        keep(&browser, "20-door.png", 1280).await;
        keep(&browser, "21-phone-door.png", 390).await;
        browser.set_window(1280, 1000).await;
        // The buyer's order is on their page.
        browser
            .click(&format!("#door-list a[href='#/subscribers/{buyer}']"))
            .await;
        browser.wait_text("main h1", "Subscriber @user90001").await;
        browser.wait_text("main", &format!("#{order}")).await;

        // From the navigation: those waiting, at every door.
        browser.click("#nav a[href='#/door']").await;
        browser.wait_text("#door-list table", "Queued").await;
        assert_eq!(value(&browser, "#dfilter-state").await, "waiting");

        // By state: the one approved at once.
        browser.select("#dfilter-state", "approved").await;
        browser.click("#dfilter button[type=submit]").await;
        let approved = browser
            .wait_text("#door-list table", "Approved at once")
            .await;
        assert!(approved.contains("90003"), "{approved}");
        assert!(approved.contains("approved"), "{approved}");
        assert!(approved.contains("Night signals"), "{approved}");
        assert!(!approved.contains("90001"), "{approved}");

        // By channel: nobody waits at the other one.
        browser.select("#dfilter-channel", "Traders’ group").await;
        browser.select("#dfilter-state", "waiting").await;
        browser.click("#dfilter button[type=submit]").await;
        browser
            .wait_text("#door-list", "No one is waiting at the door.")
            .await;
        assert_eq!(value(&browser, "#dfilter-channel").await, other.to_string());
        // Every state, every channel: all three.
        browser
            .select("#dfilter-channel", "All channels and groups")
            .await;
        browser.select("#dfilter-state", "every state").await;
        browser.click("#dfilter button[type=submit]").await;
        let all = browser
            .wait_text("#door-list table", "Approved at once")
            .await;
        for user in ["90001", "90002", "90003"] {
            assert!(all.contains(user), "{user} in {all}");
        }
    })
    .catch_unwind()
    .await;
    finish(browser, walked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_public_url_the_mini_app_door_is_refused_on_its_field() {
    let app = TestApp::spawn().await;
    let channel = id(&app
        .create_channel(-1_001_000_090_011, json!({"title": "Morning notes"}))
        .await);
    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        sign_in(
            &browser,
            &base,
            "#/channels/new",
            ADMIN_EMAIL,
            ADMIN_PASSWORD,
            "New channel",
        )
        .await;
        browser.fill("#channel-title", "Evening notes").await;
        browser
            .fill("#channel-telegram_chat_id", "-1001000090012")
            .await;
        browser.fill("#channel-currency", "UAH").await;
        browser.fill("#channel-price", "99").await;
        browser.select("#channel-door", "Mini App paywall").await;
        browser.click("#channel button[type=submit]").await;
        let message = browser.wait_text("#channel-door-error", "PUBLIC_URL").await;
        assert!(message.contains("mini_app needs PUBLIC_URL"), "{message}");
        browser.wait_text("#alert", "door").await;
        let invalid = browser
            .execute(
                "return document.getElementById('channel-door').getAttribute('aria-invalid');",
                json!([]),
            )
            .await;
        assert_eq!(invalid, json!("true"));
        assert_eq!(app.count("channels").await, 1, "nothing stored");

        // An existing channel: no paywall URL, and the same refusal on an edit.
        open(&browser, &format!("#/channels/{channel}")).await;
        browser.wait_text("main h1", "Channel: Morning notes").await;
        browser.wait_text("main form", "None: set PUBLIC_URL").await;
        browser.select("#channel-door", "Mini App paywall").await;
        browser.click("#channel button[type=submit]").await;
        browser
            .wait_text("#channel-door-error", "mini_app needs PUBLIC_URL")
            .await;
        assert_eq!(door_of(&app, channel).await, "bot");
        // The Door screen with nobody at any door.
        browser.click("#nav a[href='#/door']").await;
        browser
            .wait_text("#door-list", "No one is waiting at the door.")
            .await;
    })
    .catch_unwind()
    .await;
    finish(browser, walked).await;
}
