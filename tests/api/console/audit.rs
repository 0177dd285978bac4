//! The console's audit page in a real browser: from a channel's page to its audit, a report-only
//! run (the counts and the users of each category as the API reports them, nothing queued),
//! then "Fix" (the repairs queued, and performed by the worker, the fake chat's list right).

use serde_json::json;

use crate::{
    console::walk::serve,
    outbox::audits::{ADMIN, BANNED, CHAT, FINE_IN, LISTED, STAYED, fixture},
    support::{
        browser::Browser,
        effects::{app_with, run},
        fake_bot::FakeBot,
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD},
    },
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_page_runs_a_report_then_fixes_the_chat() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let channel = fixture(&app, &fake, CHAT).await;
    let base = serve(&app).await;
    let browser = Browser::start().await;

    // Signed in on the channel's page, then to its audit.
    browser
        .goto(&format!("{base}/console#/channels/{channel}"))
        .await;
    browser.fill("#login-email", ADMIN_EMAIL).await;
    browser.fill("#login-password", ADMIN_PASSWORD).await;
    browser.click("#login button[type=submit]").await;
    browser.wait_text("main h1", "Channel:").await;
    browser.click("#channel-audit-link").await;
    browser.wait_text("main h1", "Audit:").await;
    browser
        .wait_text("#audit-report", "has not been audited yet")
        .await;

    // Report only.
    browser.click("#run-audit").await;
    browser.wait_text("#status", "started").await;
    browser.wait_text("#audit-report", "#1 ").await;
    browser.wait_text("#audit-report", "8 of 8").await;
    browser.wait_text("#audit-report", "done").await;
    for (category, n) in [
        ("live_but_banned", "1"),
        ("not_live_but_in_chat", "1"),
        ("live_not_in_chat", "1"),
        ("exempt", "2"),
        ("unknown_to_telegram", "1"),
    ] {
        let shown = browser
            .text(&browser.find(&format!("#audit-count-{category}")).await)
            .await;
        assert_eq!(shown, n, "{category}");
    }
    let stayed = browser
        .text(&browser.find(".audit-user-not_live_but_in_chat").await)
        .await;
    assert_eq!(stayed, STAYED.to_string());
    let banned = browser
        .text(&browser.find(".audit-user-live_but_banned").await)
        .await;
    assert_eq!(banned, BANNED.to_string());
    assert_eq!(app.count("effects").await, 0, "a report queues nothing");

    // Fix: a new audit that queues the two repairs; the worker performs them.
    browser.click("#fix-audit").await;
    browser.wait_text("#status", "fixing what it finds").await;
    // The second audit of this database is #2; its report replaces the first.
    let second = browser.wait_text("#audit-report", "#2 ").await;
    assert!(second.contains("fix"), "{second}");
    browser.wait_text("#audit-report", "done").await;
    let audits = app
        .get(&format!("/api/audits?channel_id={channel}"))
        .await
        .expect(200);
    let latest = &audits["items"][0];
    assert_eq!(
        (latest["fix"].clone(), latest["status"].clone()),
        (json!(true), json!("done"))
    );
    assert_eq!(audits["items"].as_array().unwrap().len(), 2);
    assert_eq!(
        app.count("effects WHERE kind IN ('unban', 'revoke')").await,
        2
    );
    run(&app).await;
    assert_eq!(fake.members_of(CHAT), [FINE_IN, ADMIN, LISTED]);
    assert!(!fake.is_banned(CHAT, BANNED));
    browser.quit().await;
}
