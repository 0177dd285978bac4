//! The Referrals screens in a real browser: the program's rules saved (a value the API refuses
//! shown next to its field first) and seen again after a reload; an affiliate made, its link
//! shown with a Copy button, deactivated and activated from the list; an affiliate's page with
//! its commission lines (written here with SQL, as the payment core would), the sums per
//! currency and status to the minor unit, a payout recorded after its confirmation (the sums
//! move, a second one is refused in words) and the ledger's CSV; and a viewer, whom the API
//! refuses any write — checked on the page and in the database.

use futures::FutureExt;
use serde_json::json;

use crate::{
    console::{charts::keep, walk::serve},
    support::{
        browser::Browser,
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, TestApp, id},
    },
};

/// An app whose bot has a username, so affiliates have links.
async fn app() -> TestApp {
    TestApp::spawn_with(|env| {
        env.insert("TELEGRAM_BOT_USERNAME".into(), "subgate_test_bot".into());
    })
    .await
}

/// Signs in as `email` on the console's page `hash` and waits for `title`.
pub(crate) async fn sign_in(
    browser: &Browser,
    base: &str,
    hash: &str,
    email: &str,
    password: &str,
    title: &str,
) {
    browser.goto(&format!("{base}/console{hash}")).await;
    browser.wait_text("main h1", "Sign in").await;
    browser.fill("#login-email", email).await;
    browser.fill("#login-password", password).await;
    browser.click("#login button[type=submit]").await;
    browser.wait_text("main h1", title).await;
}

/// Ends the browser after a walk; a failed walk fails the test.
pub(crate) async fn finish(browser: Browser, walked: std::thread::Result<()>) {
    match walked {
        Ok(()) => browser.quit().await,
        Err(panic) => {
            browser.close().await;
            std::panic::resume_unwind(panic);
        }
    }
}

async fn value(browser: &Browser, css: &str) -> String {
    let el = browser.find(css).await;
    browser.value(&el).await
}

async fn checked(browser: &Browser, css: &str) -> bool {
    browser
        .execute(
            "return document.querySelector(arguments[0]).checked;",
            json!([css]),
        )
        .await
        == json!(true)
}

/// The program's row: enabled, attribution, window, hold, first %, renewal %, months, buyer
/// links, reward days, most reward days a month.
type ProgramRow = (
    bool,
    String,
    i32,
    i32,
    i32,
    i32,
    i32,
    bool,
    Option<i32>,
    Option<i32>,
);

async fn program_row(app: &TestApp) -> ProgramRow {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT enabled, attribution, window_days, hold_days, first_percent, renewal_percent,
                    renewal_months, buyer_links, buyer_reward_days, max_reward_days_per_month
               FROM referral_program",
            &[],
        )
        .await
        .unwrap();
    (
        r.get("enabled"),
        r.get("attribution"),
        r.get("window_days"),
        r.get("hold_days"),
        r.get("first_percent"),
        r.get("renewal_percent"),
        r.get("renewal_months"),
        r.get("buyer_links"),
        r.get("buyer_reward_days"),
        r.get("max_reward_days_per_month"),
    )
}

/// Whether affiliate `code` exists, and whether it is active.
async fn affiliate_active(app: &TestApp, code: &str) -> Option<bool> {
    app.db()
        .await
        .query_opt("SELECT active FROM affiliates WHERE code = $1", &[&code])
        .await
        .unwrap()
        .map(|r| r.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_program_is_saved_and_affiliates_are_made_with_their_links() {
    let app = app().await;
    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        sign_in(
            &browser,
            &base,
            "#/referrals",
            ADMIN_EMAIL,
            ADMIN_PASSWORD,
            "Referrals",
        )
        .await;
        browser.wait_text("#rp h2", "Program").await;
        // The defaults: off, first click, 30 days' window, 14 days' hold.
        assert!(!checked(&browser, "#rp-enabled").await);
        assert_eq!(value(&browser, "#rp-attribution").await, "first_click");
        assert_eq!(value(&browser, "#rp-window_days").await, "30");
        assert_eq!(value(&browser, "#rp-hold_days").await, "14");
        assert_eq!(value(&browser, "#rp-buyer_reward_days").await, "");
        let before = program_row(&app).await;

        // A window the API refuses: its message next to the field, nothing stored.
        browser.fill("#rp-window_days", "400").await;
        browser.click("#rp button[type=submit]").await;
        browser.wait_text("#alert", "window_days").await;
        let message = browser.wait_text("#rp-window_days-error", "").await;
        assert!(!message.trim().is_empty(), "a message next to the window");
        let invalid = browser
            .execute(
                "return document.getElementById('rp-window_days').getAttribute('aria-invalid');",
                json!([]),
            )
            .await;
        assert_eq!(invalid, json!("true"));
        assert_eq!(program_row(&app).await, before, "nothing stored");

        // The rules as the owner wants them.
        browser.click("#rp-enabled").await;
        browser.select("#rp-attribution", "Last click").await;
        for (field, v) in [
            ("window_days", "45"),
            ("hold_days", "7"),
            ("first_percent", "20"),
            ("renewal_percent", "10"),
            ("renewal_months", "6"),
            ("buyer_reward_days", "5"),
            ("max_reward_days_per_month", "20"),
        ] {
            browser.fill(&format!("#rp-{field}"), v).await;
        }
        browser.click("#rp-buyer_links").await;
        browser.click("#rp button[type=submit]").await;
        browser.wait_text("#status", "Saved the program: on").await;
        let saved: ProgramRow = (
            true,
            "last_click".into(),
            45,
            7,
            20,
            10,
            6,
            true,
            Some(5),
            Some(20),
        );
        assert_eq!(program_row(&app).await, saved);
        browser.wait_text("#rp h2", "on").await;

        // After a reload (which signs out), the form shows what was saved.
        browser.refresh().await;
        browser.wait_text("main h1", "Sign in").await;
        browser.fill("#login-email", ADMIN_EMAIL).await;
        browser.fill("#login-password", ADMIN_PASSWORD).await;
        browser.click("#login button[type=submit]").await;
        browser.wait_text("#rp h2", "Program on").await;
        assert!(checked(&browser, "#rp-enabled").await);
        assert!(checked(&browser, "#rp-buyer_links").await);
        assert_eq!(value(&browser, "#rp-attribution").await, "last_click");
        for (field, v) in [
            ("window_days", "45"),
            ("hold_days", "7"),
            ("first_percent", "20"),
            ("renewal_percent", "10"),
            ("renewal_months", "6"),
            ("buyer_reward_days", "5"),
            ("max_reward_days_per_month", "20"),
        ] {
            assert_eq!(value(&browser, &format!("#rp-{field}")).await, v, "{field}");
        }
        // Emptied, an optional number is sent as none.
        browser.fill("#rp-max_reward_days_per_month", "").await;
        browser.click("#rp button[type=submit]").await;
        browser.wait_text("#status", "Saved the program").await;
        assert_eq!(program_row(&app).await.9, None);

        // A code the API refuses (too short), next to its field.
        browser
            .wait_text("#affiliate-list", "No affiliates yet.")
            .await;
        browser.fill("#aff-name", "Partner One").await;
        browser.fill("#aff-code", "P1").await;
        browser.click("#aff button[type=submit]").await;
        browser.wait_text("#alert", "code").await;
        let message = browser.wait_text("#aff-code-error", "").await;
        assert!(!message.trim().is_empty(), "a message next to the code");
        assert_eq!(app.count("affiliates").await, 0);

        // Typed in lower case, kept in upper case; the link shown with a Copy button.
        browser.fill("#aff-code", "partner_1").await;
        browser.click("#aff button[type=submit]").await;
        browser
            .wait_text("#status", "Created affiliate Partner One (PARTNER_1)")
            .await;
        assert_eq!(
            value(&browser, "#affiliate-new-link").await,
            "https://t.me/subgate_test_bot?start=r_PARTNER_1"
        );
        browser
            .find("#affiliate-created button[aria-label='Copy link of Partner One']")
            .await;
        let row = browser
            .wait_text("#affiliate-list table", "Partner One")
            .await;
        assert!(row.contains("PARTNER_1") && row.contains("active"), "{row}");
        assert_eq!(affiliate_active(&app, "PARTNER_1").await, Some(true));

        // A second one with a made-up code, for a buyer.
        let buyer = id(&app.create_subscriber(77_001).await);
        browser.fill("#aff-name", "Ann the buyer").await;
        browser.fill("#aff-subscriber_id", &buyer.to_string()).await;
        browser.click("#aff button[type=submit]").await;
        browser
            .wait_text("#status", "Created affiliate Ann the buyer")
            .await;
        let link = value(&browser, "#affiliate-new-link").await;
        assert!(
            link.starts_with("https://t.me/subgate_test_bot?start=r_"),
            "{link}"
        );
        browser
            .wait_text("#affiliate-list table", "Ann the buyer")
            .await;

        // Deactivated from the list, then active again.
        browser
            .click("#affiliate-list button[aria-label='Deactivate affiliate Partner One']")
            .await;
        browser
            .wait_text("#status", "Partner One is deactivated")
            .await;
        assert_eq!(affiliate_active(&app, "PARTNER_1").await, Some(false));
        browser
            .click("#affiliate-list button[aria-label='Activate affiliate Partner One']")
            .await;
        browser
            .wait_text("#status", "Partner One is active again")
            .await;
        assert_eq!(affiliate_active(&app, "PARTNER_1").await, Some(true));
    })
    .catch_unwind()
    .await;
    finish(browser, walked).await;
}

/// Writes an applied payment of `buyer` and the commission line it earned, as the payment core
/// would; `days` from now to `payable_at` (negative: payable already). Returns the payment's id.
#[allow(clippy::too_many_arguments)]
async fn line(
    app: &TestApp,
    affiliate: i64,
    buyer: i64,
    external_id: &str,
    paid_minor: i64,
    kind: &str,
    amount_minor: i64,
    currency: &str,
    status: &str,
    days: i32,
) -> i64 {
    let db = app.db().await;
    let payment: i64 = db
        .query_one(
            "INSERT INTO payments (gateway, external_id, subscriber_id, amount_minor, currency,
                                   paid_at, outcome)
             VALUES ('test', $1, $2::bigint, $3, $4, now(), 'applied') RETURNING id",
            &[&external_id, &buyer, &paid_minor, &currency],
        )
        .await
        .unwrap()
        .get(0);
    db.execute(
        "INSERT INTO commission_lines (affiliate_id, payment_id, subscriber_id, kind,
                                       amount_minor, currency, percent, base_minor, status,
                                       payable_at, reversed_at)
         VALUES ($1::bigint, $2, $3::bigint, $4, $5, $6, 20, $7, $8, now() + make_interval(days => $9),
                 CASE WHEN $8 = 'reversed' THEN now() END)",
        &[
            &affiliate,
            &payment,
            &buyer,
            &kind,
            &amount_minor,
            &currency,
            &paid_minor,
            &status,
            &days,
        ],
    )
    .await
    .unwrap();
    payment
}

/// The cells of the currency table's row for `currency`, by column, their no-break spaces
/// (which `Intl.NumberFormat` puts between a currency and its amount) read as spaces, as
/// WebDriver's element text reads them.
async fn sums(browser: &Browser, currency: &str) -> serde_json::Value {
    browser
        .execute(
            "for (const tr of document.querySelectorAll('#affiliate-currencies tbody tr')) {
               const cells = Object.fromEntries(Array.from(tr.cells,
                 (td) => [td.dataset.label, td.innerText.replace(/\\u00a0/g, ' ').trim()]));
               if (cells.Currency === arguments[0]) return cells;
             }
             return null;",
            json!([currency]),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_affiliates_page_sums_its_ledger_to_the_minor_unit_and_records_a_payout() {
    let app = app().await;
    let affiliate = id(&app
        .post(
            "/api/affiliates",
            json!({"name": "Blogger", "code": "BLOGGER"}),
        )
        .await
        .expect(201));
    let (ann, bob) = (
        id(&app.create_subscriber(77_101).await),
        id(&app.create_subscriber(77_102).await),
    );
    {
        let db = app.db().await;
        for buyer in [ann, bob] {
            db.execute(
                "INSERT INTO referral_clicks (affiliate_id, subscriber_id, outcome)
                 VALUES ($1::bigint, $2::bigint, 'attributed')",
                &[&affiliate, &buyer],
            )
            .await
            .unwrap();
            db.execute(
                "INSERT INTO referral_attributions (subscriber_id, affiliate_id)
                 VALUES ($1::bigint, $2::bigint)",
                &[&buyer, &affiliate],
            )
            .await
            .unwrap();
        }
    }
    // Hryvnias: two payable lines (12.34 + 5.67), one still held (8.90), one reversed before it
    // was paid (3.33). Stars: one payable line (40).
    line(
        &app, affiliate, ann, "p1", 6_170, "first", 1_234, "UAH", "pending", -1,
    )
    .await;
    line(
        &app, affiliate, ann, "p2", 2_835, "renewal", 567, "UAH", "pending", -1,
    )
    .await;
    line(
        &app, affiliate, bob, "p3", 4_450, "first", 890, "UAH", "pending", 10,
    )
    .await;
    line(
        &app, affiliate, bob, "p4", 1_665, "renewal", 333, "UAH", "reversed", -1,
    )
    .await;
    line(
        &app, affiliate, bob, "p5", 200, "first", 40, "XTR", "pending", -1,
    )
    .await;

    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        sign_in(
            &browser,
            &base,
            &format!("#/referrals/affiliates/{affiliate}"),
            ADMIN_EMAIL,
            ADMIN_PASSWORD,
            "Affiliate: Blogger",
        )
        .await;
        browser.wait_text("#affiliate-currencies", "UAH").await;
        assert_eq!(
            browser.text(&browser.find("#affiliate-clicks").await).await,
            "2"
        );
        assert_eq!(
            browser.text(&browser.find("#affiliate-attributed").await).await,
            "2"
        );
        // Both have an earning line, Bob's taken back among them.
        assert_eq!(
            browser.text(&browser.find("#affiliate-paying").await).await,
            "2"
        );
        let uah = sums(&browser, "UAH").await;
        // Revenue: the bases of the lines not taken back (61.70 + 28.35 + 44.50).
        assert_eq!(uah["Revenue"], "UAH 134.55", "{uah}");
        assert_eq!(uah["Pending"], "UAH 8.90", "{uah}");
        assert_eq!(uah["Payable"], "UAH 18.01", "{uah}");
        assert_eq!(uah["Paid"], "UAH 0.00", "{uah}");
        assert_eq!(uah["Reversed"], "UAH 3.33", "{uah}");
        assert_eq!(uah["Reversals"], "UAH 0.00", "{uah}");
        assert_eq!(uah["Balance"], "UAH 18.01", "{uah}");
        let xtr = sums(&browser, "XTR").await;
        assert_eq!(xtr["Payable"], "⭐ 40", "{xtr}");
        assert_eq!(xtr["Balance"], "⭐ 40", "{xtr}");
        let lines = browser
            .wait_text("#affiliate-lines table", "first purchase")
            .await;
        assert!(
            lines.contains("UAH 12.34") && lines.contains("⭐ 40") && lines.contains("payable"),
            "{lines}"
        );
        browser.wait_text("#affiliate-payouts", "No payouts yet.").await;

        // The payout of the hryvnias, after its confirmation.
        browser.click("#payout-UAH").await;
        let asked = browser.wait_text("#confirm", "Record a payout to Blogger?").await;
        assert!(asked.contains("UAH 18.01"), "{asked}");
        browser.click("#confirm-ok").await;
        browser
            .wait_text("#status", "Recorded payout")
            .await;
        let status = browser.wait_text("#status", "for 2 lines").await;
        assert!(status.contains("UAH 18.01"), "{status}");
        browser.wait_text("#affiliate-payouts table", "UAH 18.01").await;
        let uah = sums(&browser, "UAH").await;
        assert_eq!(uah["Payable"], "UAH 0.00", "{uah}");
        assert_eq!(uah["Paid"], "UAH 18.01", "{uah}");
        assert_eq!(uah["Pending"], "UAH 8.90", "{uah}");
        assert_eq!(uah["Balance"], "UAH 0.00", "{uah}");
        assert_eq!(sums(&browser, "XTR").await["Balance"], "⭐ 40");
        let paid: i64 = app
            .db()
            .await
            .query_one(
                "SELECT amount_minor FROM payouts WHERE affiliate_id = $1::bigint AND currency = 'UAH'",
                &[&affiliate],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(paid, 1_801);

        // Nothing left to pay: the API's 409, explained.
        browser.click("#payout-UAH").await;
        browser.wait_text("#confirm", "Record a payout").await;
        browser.click("#confirm-ok").await;
        browser.wait_text("#alert", "Nothing to pay Blogger in UAH").await;
        assert_eq!(app.count("payouts").await, 1);

        // The ledger as CSV, fetched with the session's token.
        browser.click("#affiliate-lines button.csv").await;
        browser
            .wait_text(
                "#status",
                &format!("Downloaded commissions-affiliate-{affiliate}.csv: 5 rows."),
            )
            .await;
        // With `CONSOLE_SCREENSHOTS_DIR` set, the page as a person sees it, at both widths.
        keep(&browser, "17-affiliate.png", 1280).await;
        keep(&browser, "18-phone-affiliate.png", 390).await;
    })
    .catch_unwind()
    .await;
    finish(browser, walked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_reads_the_referrals_and_the_api_refuses_their_writes() {
    let app = app().await;
    app.post(
        "/api/affiliates",
        json!({"name": "Blogger", "code": "BLOGGER"}),
    )
    .await
    .expect(201);
    app.token_of_role("viewer").await;
    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        sign_in(
            &browser,
            &base,
            "#/referrals",
            "viewer.staff@example.com",
            "the viewer passphrase",
            "Referrals",
        )
        .await;
        browser.wait_text("#affiliate-list table", "Blogger").await;
        browser.fill("#aff-name", "Not allowed").await;
        browser.click("#aff button[type=submit]").await;
        browser.wait_text("#alert", "admin").await;
        assert_eq!(app.count("affiliates").await, 1);
    })
    .catch_unwind()
    .await;
    finish(browser, walked).await;
}
