//! The staff console in a real browser: headless Chromium walks the day's work against the real
//! server on a local port — signing in (the throttle's message as the server words it), creating
//! a channel, creating a subscriber and granting a membership, finding a `needs_review` payment,
//! retrying a dead-lettered Telegram effect, running the sweep, deleting a membership, selling
//! plans (a plan made from its channel's page with a field error first, a lifetime bundle, a
//! promo code with its uses, deactivated, and an order bought with it on the buyer's page) —
//! and checks what the page shows and the rows in the database.
//!
//! On failure every screen seen so far is saved as a PNG under `target/console-screenshots/`
//! and the path is printed. With `CONSOLE_SCREENSHOTS_DIR` set, the screens are also written
//! there on success (`docs/images/` is made so).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Mutex,
};

use futures::FutureExt;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::{
    console::offers::offers,
    support::{
        browser::Browser,
        fake_bot::{FakeBot, Reply, TOKEN},
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, TestApp, payment_event},
    },
};

/// Screens seen, in order: written out on failure, or on request for the docs.
#[derive(Default)]
pub(crate) struct Shots(Mutex<Vec<(String, Vec<u8>)>>);

impl Shots {
    fn add(&self, name: &str, png: Vec<u8>) {
        self.0.lock().unwrap().push((name.to_string(), png));
    }

    fn write_to(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for (name, png) in self.0.lock().unwrap().iter() {
            std::fs::write(dir.join(format!("{name}.png")), png)?;
        }
        Ok(())
    }
}

fn failure_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/ above target/tmp")
        .join("console-screenshots")
}

/// The desktop width of the screenshots.
const WIDTH: u32 = 1280;

/// Takes a full-page screenshot named `name`, after checking that every form control of the
/// page has a label (the console's accessibility promise).
pub(crate) async fn shot(browser: &Browser, shots: &Shots, name: &str) {
    let unlabelled = browser
        .execute(
            "return Array.from(document.querySelectorAll('input, select, textarea'))
               .filter((e) => e.offsetParent !== null && e.type !== 'hidden')
               .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
               .map((e) => e.id || e.name || e.outerHTML);",
            json!([]),
        )
        .await;
    assert_eq!(
        unlabelled,
        json!([]),
        "{name}: form controls without a label"
    );
    let png = browser.full_screenshot(WIDTH).await;
    browser.set_window(WIDTH, 1000).await;
    shots.add(name, png);
}

/// Serves the app's router on a free local port, as `subgate serve` does.
pub(crate) async fn serve(app: &TestApp) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = app
        .router
        .clone()
        .into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_walks_through_the_days_work_in_a_real_browser() {
    let fake = FakeBot::start().await;
    let url = fake.url.clone();
    let app = TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
        env.insert("TELEGRAM_BOT_USERNAME".into(), "SubGateBot".into());
        env.insert("LOGIN_MAX_FAILURES".into(), "2".into());
    })
    .await;
    let base = serve(&app).await;
    let browser = Browser::start().await;
    let shots = Shots::default();

    let walked = std::panic::AssertUnwindSafe(walk(&browser, &app, &fake, &base, &shots))
        .catch_unwind()
        .await;
    if let Err(panic) = walked {
        if let Ok(png) = std::panic::AssertUnwindSafe(browser.screenshot())
            .catch_unwind()
            .await
        {
            shots.add("zz-failure", png);
        }
        let dir = failure_dir();
        let _ = std::fs::remove_dir_all(&dir);
        match shots.write_to(&dir) {
            Ok(()) => eprintln!(
                "console test failed; screenshots of each screen: {}",
                dir.display()
            ),
            Err(e) => eprintln!("console test failed; screenshots not saved ({e})"),
        }
        browser.close().await;
        std::panic::resume_unwind(panic);
    }
    if let Some(dir) = std::env::var_os("CONSOLE_SCREENSHOTS_DIR").filter(|d| !d.is_empty()) {
        shots
            .write_to(Path::new(&dir))
            .expect("CONSOLE_SCREENSHOTS_DIR is writable");
        eprintln!(
            "console screenshots written to {}",
            Path::new(&dir).display()
        );
    }
    browser.quit().await;
}

async fn walk(browser: &Browser, app: &TestApp, fake: &FakeBot, base: &str, shots: &Shots) {
    // ---- sign in: wrong passwords, then the throttle's own words, then the right password.
    browser.goto(&format!("{base}/console")).await;
    browser.find("#login-email").await;
    shot(browser, shots, "01-sign-in").await;
    for attempt in 1..=3 {
        browser.fill("#login-email", "intruder@example.com").await;
        browser.fill("#login-password", "not the password").await;
        browser.click("#login button[type=submit]").await;
        if attempt < 3 {
            browser
                .wait_text("#alert", "missing or invalid credentials")
                .await;
            // The next attempt must not match the previous text by accident.
            browser
                .execute(
                    "document.getElementById('alert').textContent = '';",
                    json!([]),
                )
                .await;
        }
    }
    let throttled = browser.wait_text("#alert", "too many attempts").await;
    assert!(
        throttled.contains("retry after") && throttled.contains("Retry-After"),
        "the 429's detail and Retry-After are shown: {throttled}"
    );
    shot(browser, shots, "02-sign-in-throttled").await;
    browser.fill("#login-email", ADMIN_EMAIL).await;
    browser.fill("#login-password", ADMIN_PASSWORD).await;
    // Submitted from the keyboard.
    let password = browser.find("#login-password").await;
    browser.type_keys(&password, "\u{E007}").await;
    browser
        .wait_text("#status", &format!("Signed in as {ADMIN_EMAIL}"))
        .await;
    browser.wait_text("main h1", "Overview").await;
    browser.wait_text("main", "No channels yet").await;
    let stored = browser
        .execute(
            "return [localStorage.length, sessionStorage.length, document.cookie];",
            json!([]),
        )
        .await;
    assert_eq!(
        stored,
        json!([0, 0, ""]),
        "the token is kept in memory only"
    );

    // ---- create a channel.
    browser.click("a[href='#/channels']").await;
    browser.wait_text("main h1", "Channels").await;
    browser
        .wait_text("#channels-hint", "private Telegram channel or group")
        .await;
    browser.click("a[href='#/channels/new']").await;
    browser.wait_text("main h1", "New channel").await;
    browser
        .wait_text("main form", "The id of the Telegram channel or group")
        .await;
    browser.fill("#channel-title", "Premium signals").await;
    browser
        .fill("#channel-telegram_chat_id", "-1001000000001")
        .await;
    browser.fill("#channel-currency", "UAH").await;
    browser.fill("#channel-price", "199.5").await;
    browser.fill("#channel-billing_period_days", "30").await;
    browser.fill("#channel-grace_period_days", "3").await;
    browser.fill("#channel-seat_limit", "10").await;
    browser
        .fill(
            "#channel-description",
            "Daily trading signals with a weekly review.",
        )
        .await;
    // A description without a title in a language is refused before anything is sent.
    browser
        .fill("#channel-tr-uk-description", "Щоденні торгові сигнали.")
        .await;
    browser.click("#channel button[type=submit]").await;
    browser
        .wait_text("#channel-tr-uk-title-error", "is needed with a description")
        .await;
    browser
        .fill("#channel-tr-uk-title", "Преміум-сигнали")
        .await;
    browser.click("#channel button[type=submit]").await;
    browser
        .wait_text("#status", "Created channel “Premium signals”")
        .await;
    browser
        .wait_text("main h1", "Channel: Premium signals")
        .await;
    let row = app
        .db()
        .await
        .query_one(
            "SELECT id, price_minor, currency, grace_period_days, seat_limit, description,
                    translations
             FROM channels WHERE telegram_chat_id = -1001000000001",
            &[],
        )
        .await
        .unwrap();
    let channel_id: i32 = row.get(0);
    assert_eq!(
        row.get::<_, i64>(1),
        19950,
        "199.5 UAH is 19950 minor units"
    );
    assert_eq!(row.get::<_, String>(2), "UAH");
    assert_eq!(row.get::<_, i32>(3), 3);
    assert_eq!(row.get::<_, Option<i32>>(4), Some(10));
    assert_eq!(
        row.get::<_, Option<String>>(5).as_deref(),
        Some("Daily trading signals with a weekly review.")
    );
    assert_eq!(
        row.get::<_, serde_json::Value>(6),
        json!({"uk": {"title": "Преміум-сигнали", "description": "Щоденні торгові сигнали."}})
    );
    let buy_link = browser.find("#channel-buy-link").await;
    assert_eq!(
        browser.value(&buy_link).await,
        format!("https://t.me/SubGateBot?start=c{channel_id}")
    );
    browser.click("button[aria-label='Copy Buy link']").await;
    browser
        .wait_text("#status", "Copied: https://t.me/SubGateBot")
        .await;
    // An edit sends what changed: the price, shown back in currency units.
    browser.fill("#channel-price", "199.00").await;
    browser.click("#channel button[type=submit]").await;
    browser.wait_text("#status", "Saved channel").await;
    let price: i64 = app
        .db()
        .await
        .query_one(
            "SELECT price_minor FROM channels WHERE id = $1",
            &[&channel_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(price, 19900);
    shot(browser, shots, "04-channel").await;
    browser.click("a[href='#/channels']").await;
    browser.wait_text("main", "UAH 199.00").await;
    shot(browser, shots, "03-channels").await;

    // ---- a subscriber, found by username, granted a membership.
    browser.click("a[href='#/subscribers']").await;
    browser.wait_text("main h1", "Subscribers").await;
    browser
        .fill("#new-subscriber-telegram_user_id", "100000001")
        .await;
    browser.fill("#new-subscriber-username", "ann").await;
    browser.fill("#new-subscriber-display_name", "Ann K.").await;
    browser
        .select("#new-subscriber-language", "Українська (uk)")
        .await;
    browser.click("#new-subscriber button[type=submit]").await;
    browser.wait_text("main h1", "Subscriber @ann").await;
    browser.wait_text("main dl", "Українська (uk)").await;
    let ann: i32 = app
        .db()
        .await
        .query_one(
            "SELECT id FROM subscribers WHERE telegram_user_id = 100000001",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // The bot's language for this buyer, changed by staff.
    browser
        .select("#sub-language-language", "Русский (ru)")
        .await;
    browser.click("#sub-language button[type=submit]").await;
    browser
        .wait_text(
            "#status",
            "The bot now writes to this subscriber in Русский (ru).",
        )
        .await;
    let language: Option<String> = app
        .db()
        .await
        .query_one("SELECT language FROM subscribers WHERE id = $1", &[&ann])
        .await
        .unwrap()
        .get(0);
    assert_eq!(language.as_deref(), Some("ru"));
    browser.click("a[href='#/subscribers']").await;
    browser.fill("#search-q", "@ANN").await;
    browser.click("#search button[type=submit]").await;
    browser.wait_text("main", "Results for “@ANN”").await;
    browser
        .click(&format!("main table a[href='#/subscribers/{ann}']"))
        .await;
    browser.wait_text("main h1", "Subscriber @ann").await;
    browser.select("#grant-channel_id", "Premium signals").await;
    browser.fill("#grant-days", "30").await;
    browser.click("#grant button[type=submit]").await;
    browser
        .wait_text(
            "#status",
            "Granted 30 days of Premium signals: active until",
        )
        .await;
    browser.wait_text("main table", "active").await;
    let (status, days): (String, f64) = {
        let r = app
            .db()
            .await
            .query_one(
                "SELECT status, extract(epoch FROM expires_at - statement_timestamp())::float8 / 86400
                 FROM memberships WHERE subscriber_id = $1 AND channel_id = $2",
                &[&ann, &channel_id],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(status, "active");
    assert!((29.9..=30.0).contains(&days), "30 days granted: {days}");
    assert_eq!(
        app.count("membership_events WHERE cause = 'staff'").await,
        1,
        "one grant, even with the Idempotency-Key's replay protection"
    );

    // ---- a payment that needs review: door 1 with an amount that differs from the order's.
    let order = app.create_order(ann as i64, channel_id as i64).await;
    let short = payment_event(
        "pay-short-1",
        order["reference"].as_str().unwrap(),
        10000,
        "UAH",
    );
    let r = app.post_signed_webhook(&short).await.expect(200);
    assert_eq!(r["payment"]["outcome"], "needs_review");
    // And a correct payment from another buyer, for the revenue.
    let bob = app.create_subscriber(100000002).await;
    let paid = app
        .create_order(bob["id"].as_i64().unwrap(), channel_id as i64)
        .await;
    app.pay_order(&paid, "pay-ok-1").await.expect(200);

    browser.click("a[href='#/payments']").await;
    browser.wait_text("main h1", "Payments").await;
    let text = browser
        .wait_text(
            "main table",
            "The amount paid differs from the order’s amount.",
        )
        .await;
    assert!(
        text.contains("UAH 100.00") && text.contains("needs_review"),
        "{text}"
    );
    assert!(
        text.contains(order["reference"].as_str().unwrap()),
        "the order is shown"
    );
    assert!(
        text.contains(&format!("Subscriber #{ann}")),
        "the payer is shown"
    );
    assert!(
        !text.contains("pay-ok-1"),
        "needs_review is the default filter"
    );
    browser.find("main table a[href*='grant_channel=']").await;
    shot(browser, shots, "07-payments").await;
    // What staff can do: grant by hand from the payment.
    browser.click("main table a[href*='grant_channel=']").await;
    browser.wait_text("main h1", "Subscriber @ann").await;
    browser.find("#grant-channel_id").await;
    shot(browser, shots, "05-subscriber").await;

    // ---- a dead-lettered effect with Telegram's words, retried from the console.
    fake.script(
        "sendMessage",
        Reply::Error(400, "Bad Request: chat not found".into()),
    );
    subgate::app::worker::run_once(&app.state).await.unwrap();
    let failed: Vec<i64> = app
        .db()
        .await
        .query(
            "SELECT id FROM effects WHERE status = 'failed' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!failed.is_empty(), "the grants failed");
    browser.click("a[href='#/effects']").await;
    browser.wait_text("main h1", "Telegram effects").await;
    browser
        .wait_text("main table", "Bad Request: chat not found")
        .await;
    shot(browser, shots, "08-effects").await;
    let first = failed[0];
    browser
        .click(&format!("button[aria-label='Retry effect #{first}']"))
        .await;
    browser
        .wait_text("#status", &format!("Effect #{first} is pending again"))
        .await;
    let status: String = app
        .db()
        .await
        .query_one("SELECT status FROM effects WHERE id = $1", &[&first])
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "pending");
    if failed.len() > 1 {
        browser.click("#retry-all").await;
        browser.wait_text("#status", "sent back to the queue").await;
    } else {
        browser.wait_text("main", "No dead letters.").await;
    }
    assert_eq!(app.count("effects WHERE status = 'failed'").await, 0);

    // ---- the sweep, run now.
    browser.click("a[href='#/sweep']").await;
    browser.wait_text("main h1", "Sweep").await;
    browser.click("#run-sweep").await;
    browser
        .wait_text("#status", "Sweep finished: examined")
        .await;
    browser.wait_text("#sweep-result", "Moved to grace").await;
    browser.wait_text("main", "Started by").await;
    shot(browser, shots, "09-sweep").await;

    // ---- the overview, with every count a link to its list.
    browser.click("a[href='#/overview']").await;
    browser.wait_text("main h1", "Overview").await;
    let text = browser.wait_text("main", "Payments needing review").await;
    assert!(
        text.contains("UAH 199.00"),
        "revenue in currency units: {text}"
    );
    assert!(text.contains("2 / 10"), "seats taken / limit: {text}");
    browser
        .find("a[href='#/payments?outcome=needs_review']")
        .await;
    browser.find("a[href='#/effects?status=failed']").await;
    browser
        .find(&format!(
            "a[href='#/memberships?channel_id={channel_id}&status=active']"
        ))
        .await;
    shot(browser, shots, "00-overview").await;
    browser
        .click(&format!(
            "a[href='#/memberships?channel_id={channel_id}&status=active']"
        ))
        .await;
    browser.wait_text("main h1", "Memberships").await;
    browser
        .wait_text("main table", &format!("Subscriber #{ann}"))
        .await;
    shot(browser, shots, "06-memberships").await;

    // ---- on a phone.
    browser.set_window(390, 844).await;
    browser.click("a[href='#/payments']").await;
    browser.wait_text("main", "The amount paid differs").await;
    let phone = browser.full_screenshot(390).await;
    shots.add("10-phone-payments", phone);
    browser.set_window(WIDTH, 1000).await;

    // ---- delete a membership: the confirmation says the member leaves the channel.
    browser
        .goto(&format!("{base}/console/#/subscribers/{ann}"))
        .await;
    browser.refresh().await;
    // A reload signs out: the token was only in memory.
    browser.wait_text("main h1", "Sign in").await;
    browser.fill("#login-email", ADMIN_EMAIL).await;
    browser.fill("#login-password", ADMIN_PASSWORD).await;
    browser.click("#login button[type=submit]").await;
    browser.wait_text("main h1", "Subscriber @ann").await;
    // A staff correction through the membership PATCH: the status only.
    browser
        .click("main table button[aria-controls^='correct-']")
        .await;
    browser.select("form[id^='correct-'] select", "grace").await;
    browser
        .click("form[id^='correct-'] button[type=submit]")
        .await;
    browser.wait_text("#status", "Corrected: grace until").await;
    let status: String = app
        .db()
        .await
        .query_one(
            "SELECT status FROM memberships WHERE subscriber_id = $1",
            &[&ann],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "grace");
    assert_eq!(
        app.count("membership_events WHERE cause = 'staff'").await,
        2
    );
    browser.click("main table button.danger").await;
    let dialog = browser
        .wait_text("#confirm", "will be removed from the Telegram channel")
        .await;
    assert!(dialog.contains("Premium signals"), "{dialog}");
    shot(browser, shots, "05b-delete-confirmation").await;
    browser.click("#confirm-ok").await;
    browser
        .wait_text("#status", "removal from “Premium signals” is queued")
        .await;
    assert_eq!(
        app.count(&format!(
            "memberships WHERE subscriber_id = {ann} AND channel_id = {channel_id}"
        ))
        .await,
        0
    );
    assert_eq!(
        app.count("effects WHERE kind = 'revoke' AND status = 'pending'")
            .await,
        1,
        "the member is removed from the channel"
    );

    // ---- plans and promo codes.
    offers(browser, app, base, shots, channel_id).await;

    // ---- sign out.
    browser.click("#sign-out").await;
    browser.wait_text("#status", "Signed out.").await;
    browser.wait_text("main h1", "Sign in").await;
    let nav_hidden = browser
        .execute("return document.getElementById('nav').hidden;", json!([]))
        .await;
    assert_eq!(nav_hidden, Value::Bool(true));
}
