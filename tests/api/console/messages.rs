//! Messages to members in a real browser: the four automations (a text with an unknown
//! placeholder refused next to its field, a valid one with its delay and promo code kept across
//! a reload); a broadcast composed with its recipients counted as the segment changes, created
//! and listed, one sent now whose progress the page follows, and a scheduled one cancelled;
//! and, on a buyer's page, the messages sent to them and whether they said /stop or blocked the
//! bot — checked on the page and through the API.

use futures::FutureExt;
use serde_json::{Value, json};

use crate::{
    bot::conversation::{person, send, text_update},
    console::walk::serve,
    support::{
        browser::Browser,
        effects::{app_with, grant, run, run_until_done},
        fake_bot::{FakeBot, Reply},
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, TestApp, id},
    },
};

/// Signs in on the console's page `hash` and waits for its title.
async fn sign_in(browser: &Browser, base: &str, hash: &str, title: &str) {
    browser.goto(&format!("{base}/console{hash}")).await;
    sign_in_here(browser, title).await;
}

/// Signs in on the sign-in screen shown now (after a reload) and waits for `title`.
async fn sign_in_here(browser: &Browser, title: &str) {
    browser.wait_text("main h1", "Sign in").await;
    browser.fill("#login-email", ADMIN_EMAIL).await;
    browser.fill("#login-password", ADMIN_PASSWORD).await;
    browser.click("#login button[type=submit]").await;
    browser.wait_text("main h1", title).await;
}

/// Ends the browser after a walk; a failed walk fails the test.
async fn finish(browser: Browser, walked: std::thread::Result<()>) {
    match walked {
        Ok(()) => browser.quit().await,
        Err(panic) => {
            browser.close().await;
            std::panic::resume_unwind(panic);
        }
    }
}

/// The number after the first `#` of a message ("Broadcast #12 is …").
fn number_in(text: &str) -> i64 {
    text.split('#')
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no #number in {text:?}"))
}

/// Whether the element `css` is on the page now.
async fn present(browser: &Browser, css: &str) -> bool {
    browser
        .execute(
            "return document.querySelector(arguments[0]) !== null;",
            json!([css]),
        )
        .await
        == json!(true)
}

async fn automation(app: &TestApp, kind: &str) -> Value {
    let list = app.get("/api/automations").await.expect(200);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == kind)
        .cloned()
        .unwrap_or_else(|| panic!("no automation {kind} in {list}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_automations_screen_saves_what_the_api_accepts_and_shows_what_it_refuses() {
    let app = TestApp::spawn().await;
    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        sign_in(&browser, &base, "#/automations", "Automations").await;
        browser
            .wait_text("#auto-renewal_failed h2", "Renewal failed")
            .await;
        let names = browser
            .execute(
                "return Array.from(document.querySelectorAll('form.automation h2'),
                                   (h) => h.textContent);",
                json!([]),
            )
            .await;
        assert_eq!(
            names,
            json!([
                "Unpaid checkout off",
                "Win back off",
                "Cancel offer off",
                "Renewal failed off"
            ]),
            "the four automations, in the API's order, all off"
        );
        // The defaults, each in a human unit.
        let waits = browser.wait_text("#auto-win_back", "Waits").await;
        assert!(waits.contains("3 days"), "{waits}");
        let delay = browser.find("#auto-unpaid_checkout-delay_minutes").await;
        assert_eq!(browser.value(&delay).await, "1");
        let unit = browser.find("#auto-unpaid_checkout-delay_unit").await;
        assert_eq!(browser.value(&unit).await, "hours");

        // A placeholder the bot does not know: the API's 422, next to the field.
        browser
            .fill("#auto-win_back-text-uk", "Повертайтеся, { $nickname }!")
            .await;
        browser.click("#auto-win_back button[type=submit]").await;
        browser.wait_text("#alert", "texts.uk").await;
        let slot = browser.find("#auto-win_back-text-uk-error").await;
        let message = browser.text(&slot).await;
        assert!(
            message.contains("nickname"),
            "the message next to the Ukrainian text names the placeholder: {message}"
        );
        let invalid = browser
            .execute(
                "return document.getElementById('auto-win_back-text-uk').getAttribute('aria-invalid');",
                json!([]),
            )
            .await;
        assert_eq!(invalid, json!("true"));
        assert_eq!(
            automation(&app, "win_back").await["texts"],
            json!({}),
            "nothing stored"
        );

        // A valid one: on, after two days, with a promo code.
        browser
            .fill("#auto-win_back-text-uk", "Повертайтеся, { $name }: код { $code }")
            .await;
        browser
            .fill("#auto-win_back-text-en", "Come back, { $name }: use { $code }")
            .await;
        browser.click("#auto-win_back-enabled").await;
        browser.fill("#auto-win_back-delay_minutes", "2").await;
        browser.select("#auto-win_back-delay_unit", "days").await;
        browser.click("#auto-win_back-promo_on").await;
        browser.fill("#auto-win_back-percent_off", "20").await;
        browser.fill("#auto-win_back-valid_days", "14").await;
        browser.click("#auto-win_back button[type=submit]").await;
        browser
            .wait_text("#status", "Saved Win back: on, 2 days after the event.")
            .await;
        let saved = automation(&app, "win_back").await;
        assert_eq!(saved["enabled"], true);
        assert_eq!(saved["delay_minutes"], 2880, "two days, sent in minutes");
        assert_eq!(
            saved["texts"],
            json!({"en": "Come back, { $name }: use { $code }",
                   "uk": "Повертайтеся, { $name }: код { $code }"})
        );
        assert_eq!(saved["promo"]["percent_off"], 20);
        assert_eq!(saved["promo"]["valid_days"], 14);

        // A reload signs out; signed in again, the screen shows what was saved.
        browser.refresh().await;
        sign_in_here(&browser, "Automations").await;
        browser.wait_text("#auto-win_back h2", "Win back on").await;
        for (css, want) in [
            ("#auto-win_back-text-uk", "Повертайтеся, { $name }: код { $code }"),
            ("#auto-win_back-text-en", "Come back, { $name }: use { $code }"),
            ("#auto-win_back-text-ru", ""),
            ("#auto-win_back-delay_minutes", "2"),
            ("#auto-win_back-delay_unit", "days"),
            ("#auto-win_back-percent_off", "20"),
            ("#auto-win_back-valid_days", "14"),
        ] {
            let el = browser.find(css).await;
            assert_eq!(browser.value(&el).await, want, "{css}");
        }
        let ticked = browser
            .execute(
                "return ['auto-win_back-enabled', 'auto-win_back-promo_on', 'auto-cancel_offer-enabled']
                   .map((id) => document.getElementById(id).checked);",
                json!([]),
            )
            .await;
        assert_eq!(ticked, json!([true, true, false]));
    })
    .catch_unwind()
    .await;
    finish(browser, walked).await;
}

/// A buyer with a bot language and thirty days of `channel`.
async fn member(app: &TestApp, telegram_user_id: i64, language: &str, channel: i64) -> i64 {
    let buyer = id(&app
        .post(
            "/api/subscribers",
            json!({"telegram_user_id": telegram_user_id, "language": language,
                   "username": format!("buyer{telegram_user_id}")}),
        )
        .await
        .expect(201));
    grant(app, buyer, channel, 30).await;
    buyer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_is_counted_created_followed_and_cancelled_and_the_buyer_sees_it() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let signals = id(&app
        .create_channel(-1_001_000_037_001, json!({"title": "Premium signals"}))
        .await);
    let review = id(&app
        .create_channel(-1_001_000_037_002, json!({"title": "Weekly review"}))
        .await);
    let ann = member(&app, 37_001, "uk", signals).await;
    let bee = member(&app, 37_002, "uk", signals).await;
    let cid = member(&app, 37_003, "en", signals).await;
    member(&app, 37_004, "ru", review).await;
    // A member of the channel who said /stop to the bot: never counted.
    let quiet = member(&app, 37_005, "uk", signals).await;
    send(&app, &text_update(&person(37_005), "/stop")).await;
    // The grants' messages are sent, so the worker runs below send only the broadcast.
    run_until_done(&app).await;
    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        sign_in(&browser, &base, "#/broadcasts", "Broadcasts").await;
        browser.wait_text("main", "No broadcasts yet.").await;
        browser.click("main a[href='#/broadcasts/new']").await;
        browser.wait_text("main h1", "New broadcast").await;

        // Everybody reachable, then the members of one channel.
        browser
            .wait_text("#broadcast-preview", "4 buyers would get it now")
            .await;
        browser
            .select("#broadcast-channel_ids", "Premium signals")
            .await;
        let counted = browser
            .wait_text("#broadcast-preview", "3 buyers would get it now")
            .await;
        assert!(
            counted.contains("English 1")
                && counted.contains("Українська 2")
                && counted.contains("Русский 0"),
            "by language: {counted}"
        );
        // Only those reading Ukrainian.
        browser.click("#broadcast-languages-uk").await;
        browser
            .wait_text("#broadcast-preview", "2 buyers would get it now")
            .await;
        browser.click("#broadcast-languages-uk").await;
        browser
            .wait_text("#broadcast-preview", "3 buyers would get it now")
            .await;

        // Sent now, to the channel's members.
        browser
            .fill("#broadcast-text-en", "Big news, { $name }!")
            .await;
        browser
            .fill("#broadcast-text-uk", "Важливі новини, { $name }!")
            .await;
        browser.click("#broadcast button[type=submit]").await;
        let now = browser.wait_text("#status", "is being sent").await;
        browser.wait_text("main h1", "Broadcasts").await;
        let sent_now = number_in(&now);
        let listed = browser
            .wait_text("#broadcast-list table", &format!("#{sent_now}"))
            .await;
        assert!(listed.contains("Big news"), "{listed}");
        let stored = app
            .get(&format!("/api/broadcasts/{sent_now}"))
            .await
            .expect(200);
        assert_eq!(stored["segment"], json!({"channel_ids": [signals]}));
        assert_eq!(
            stored["texts"],
            json!({"en": "Big news, { $name }!", "uk": "Важливі новини, { $name }!"})
        );

        // Its page follows the sending: one buyer blocked the bot.
        browser
            .click(&format!(
                "#broadcast-list a[href='#/broadcasts/{sent_now}']"
            ))
            .await;
        browser
            .wait_text("main h1", &format!("Broadcast #{sent_now}"))
            .await;
        let who = browser.wait_text("main .facts", "Who").await;
        assert!(
            who.contains("Live members (active or in grace) of Premium signals"),
            "{who}"
        );
        fake.script(
            "sendMessage",
            Reply::Error(403, "Forbidden: bot was blocked by the user".into()),
        );
        // Sent, then finished by the worker's next run.
        run_until_done(&app).await;
        run(&app).await;
        browser.wait_text("#broadcast-status", "finished").await;
        browser.wait_text("#broadcast-count-sent", "2").await;
        browser.wait_text("#broadcast-count-blocked", "1").await;
        assert!(
            !present(&browser, "#cancel-broadcast").await,
            "a finished broadcast cannot be cancelled"
        );

        // Scheduled for later, then cancelled.
        browser.click("a[href='#/broadcasts']").await;
        browser.wait_text("main h1", "Broadcasts").await;
        browser.click("main a[href='#/broadcasts/new']").await;
        browser.wait_text("main h1", "New broadcast").await;
        browser.fill("#broadcast-text-en", "Sale on Friday").await;
        browser
            .select("#broadcast-when", "at a date and time")
            .await;
        browser
            .execute(
                "document.getElementById('broadcast-send_at').value = '2030-01-15T10:00';",
                json!([]),
            )
            .await;
        browser.click("#broadcast button[type=submit]").await;
        let scheduled = browser.wait_text("#status", "is scheduled for").await;
        let later = number_in(&scheduled);
        let listed = browser
            .wait_text("#broadcast-list table", "Sale on Friday")
            .await;
        assert!(listed.contains("scheduled"), "{listed}");
        browser
            .click(&format!("#broadcast-list a[href='#/broadcasts/{later}']"))
            .await;
        browser
            .wait_text("main h1", &format!("Broadcast #{later}"))
            .await;
        browser.wait_text("#broadcast-status", "scheduled").await;
        browser.click("#cancel-broadcast").await;
        browser
            .wait_text("#confirm-title", &format!("Cancel broadcast #{later}?"))
            .await;
        browser.click("#confirm-ok").await;
        browser
            .wait_text("#status", &format!("Broadcast #{later} is cancelled"))
            .await;
        browser.wait_text("#broadcast-status", "cancelled").await;
        assert_eq!(
            app.get(&format!("/api/broadcasts/{later}"))
                .await
                .expect(200)["status"],
            "cancelled"
        );

        // The buyers' pages: what was sent, who blocked the bot, who said /stop.
        let mut blocked = Vec::new();
        for (buyer, telegram_id, text) in [
            (ann, 37_001, "Важливі новини"),
            (bee, 37_002, "Важливі новини"),
            (cid, 37_003, "Big news"),
        ] {
            let reachable = app
                .get(&format!("/api/subscribers/{buyer}"))
                .await
                .expect(200)["reachable"]
                == true;
            browser
                .execute(
                    "location.hash = arguments[0];",
                    json!([format!("#/subscribers/{buyer}")]),
                )
                .await;
            browser
                .wait_text("main h1", &format!("Subscriber @buyer{telegram_id}"))
                .await;
            let messages = browser
                .wait_text("#sub-messages-list", &format!("Broadcast #{sent_now}"))
                .await;
            if reachable {
                assert!(
                    messages.contains("sent") && messages.contains(text),
                    "{messages}"
                );
                browser
                    .wait_text("#sub-reachable", "has not blocked the bot")
                    .await;
            } else {
                assert!(messages.contains("blocked"), "{messages}");
                browser.wait_text("#sub-reachable", "blocked the bot").await;
                blocked.push(buyer);
            }
            browser
                .wait_text("#sub-opt-out", "has not said /stop")
                .await;
        }
        assert_eq!(blocked.len(), 1, "one buyer blocked the bot: {blocked:?}");
        browser
            .execute(
                "location.hash = arguments[0];",
                json!([format!("#/subscribers/{quiet}")]),
            )
            .await;
        browser.wait_text("main h1", "Subscriber @buyer37005").await;
        browser.wait_text("#sub-opt-out", "Gets none until").await;
        browser
            .wait_text("#sub-messages-list", "No messages sent to this buyer yet.")
            .await;
    })
    .catch_unwind()
    .await;
    finish(browser, walked).await;
}
