//! The console in a real browser (headless Chromium, as in `console.rs`): the overview's banner
//! when the bot lost its admin rights in a channel, the channel's view with the bot's status, and
//! its exemption list managed from that view — checked on the page and in the database.

use serde_json::json;

use crate::{
    console::walk::serve,
    outbox::chat_members::{bot_demoted, member, my_chat_member_update},
    support::{
        browser::Browser,
        fake_bot::BOT_ID,
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, TestApp},
    },
};

async fn exempt_users(app: &TestApp) -> Vec<(i64, Option<String>)> {
    app.db()
        .await
        .query(
            "SELECT telegram_user_id, note FROM channel_exemptions ORDER BY telegram_user_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_lost_rights_and_manages_exemptions() {
    let app = TestApp::spawn().await;
    let chat = -1_001_000_022_001;
    let lost = app
        .create_channel(chat, json!({"title": "Rust Weekly"}))
        .await;
    app.create_channel(-1_001_000_022_002, json!({"title": "Healthy channel"}))
        .await;
    app.post_telegram_update(bot_demoted(chat))
        .await
        .expect(200);
    let base = serve(&app).await;
    let browser = Browser::start().await;

    browser.goto(&format!("{base}/console")).await;
    browser.fill("#login-email", ADMIN_EMAIL).await;
    browser.fill("#login-password", ADMIN_PASSWORD).await;
    browser.click("#login button[type=submit]").await;
    browser.wait_text("main h1", "Overview").await;
    let banner = browser
        .wait_text("#rights-banner", "The bot has lost its admin rights in:")
        .await;
    assert!(banner.contains("Rust Weekly"), "{banner}");
    assert!(!banner.contains("Healthy channel"), "{banner}");

    // The banner's link opens the channel, which shows the status.
    browser.click("#rights-banner a").await;
    browser.wait_text("main h1", "Channel: Rust Weekly").await;
    browser.wait_text("#channel-rights", "no rights").await;
    browser
        .wait_text("#exemptions-list", "No exempt users")
        .await;

    // An exemption: a bad id is refused next to its field, then one is added with a note.
    browser.fill("#exemption-telegram_user_id", "-5").await;
    browser.click("#exemption button[type=submit]").await;
    browser
        .wait_text(
            "#exemption-telegram_user_id-error",
            "must be a positive whole number",
        )
        .await;
    browser
        .fill("#exemption-telegram_user_id", "777000111")
        .await;
    browser.fill("#exemption-note", "the editor").await;
    browser.click("#exemption button[type=submit]").await;
    browser
        .wait_text("#status", "User 777000111 is exempt")
        .await;
    let listed = browser.wait_text("#exemptions-list", "777000111").await;
    assert!(listed.contains("the editor"), "{listed}");
    assert_eq!(
        exempt_users(&app).await,
        vec![(777_000_111, Some("the editor".to_string()))]
    );
    // The same user again: the server's 409, in its own words.
    browser
        .fill("#exemption-telegram_user_id", "777000111")
        .await;
    browser.click("#exemption button[type=submit]").await;
    browser.wait_text("#alert", "already exempt").await;

    // Removed from the list.
    browser
        .click("#exemptions-list button[aria-label='Remove the exemption of 777000111']")
        .await;
    browser
        .wait_text("#status", "User 777000111 is no longer exempt")
        .await;
    browser
        .wait_text("#exemptions-list", "No exempt users")
        .await;
    assert_eq!(exempt_users(&app).await, vec![]);

    // Rights back: the channel says so, and the overview has no banner.
    app.post_telegram_update(my_chat_member_update(
        chat,
        member(BOT_ID, "administrator", Some((true, true))),
    ))
    .await
    .expect(200);
    browser.click("a[href='#/overview']").await;
    browser.wait_text("main", "Members by channel").await;
    let gone = browser
        .execute(
            "return document.getElementById('rights-banner') === null;",
            json!([]),
        )
        .await;
    assert_eq!(gone, json!(true));
    browser
        .click(&format!("main a[href='#/channels/{}']", lost["id"]))
        .await;
    browser.wait_text("main h1", "Channel: Rust Weekly").await;
    browser
        .wait_text("#channel-rights", "can manage members")
        .await;
    browser.quit().await;
}
