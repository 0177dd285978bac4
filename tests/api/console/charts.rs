//! The console's charts, audit log and staff pages in a real browser: revenue and members drawn
//! by uPlot from the statistics (pixels on the canvas, figures in the tables beside them), on a
//! desktop and on a phone's width, a change of interval, the audit log listing the writes made;
//! the owner making, changing and disabling an account, and changing their own password.

use serde_json::{Value, json};

use crate::{
    console::walk::serve,
    support::{
        browser::Browser,
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, TestApp, id},
    },
};

/// With `CONSOLE_SCREENSHOTS_DIR` set (as for `console.rs`), the screen is saved there as
/// `name` (docs/images/ is made so).
pub(crate) async fn keep(browser: &Browser, name: &str, width: u32) {
    if let Ok(dir) = std::env::var("CONSOLE_SCREENSHOTS_DIR") {
        let png = browser.full_screenshot(width).await;
        std::fs::write(std::path::Path::new(&dir).join(name), png).expect("write a screenshot");
    }
}

/// How many pixels of the chart's canvas are not transparent (what uPlot drew).
async fn drawn_pixels(browser: &Browser, figure: &str) -> i64 {
    let script = "const c = document.querySelector(arguments[0] + ' canvas');
        if (!c) return -1;
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) n++;
        return n;";
    browser
        .execute(script, json!([figure]))
        .await
        .as_i64()
        .unwrap_or(-1)
}

async fn wait_drawn(browser: &Browser, figure: &str) -> i64 {
    browser.find(&format!("{figure}[data-drawn]")).await;
    drawn_pixels(browser, figure).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_draw_revenue_and_members_and_the_audit_log_lists_writes() {
    let app = TestApp::spawn().await;
    let channel = id(&app
        .create_channel(
            -1_001_000_044_001,
            json!({"title": "Signals", "price_minor": 10_000}),
        )
        .await);
    for n in 0..3 {
        let sub = id(&app.create_subscriber(44_000 + n).await);
        let order = app.create_order(sub, channel).await;
        app.pay_order(&order, &format!("chart-pay-{n}"))
            .await
            .expect(200);
    }
    // Two of the payments were made on earlier days, so the lines have a shape.
    app.db()
        .await
        .execute(
            "UPDATE payments SET paid_at = paid_at - (id % 3) * interval '1 day'",
            &[],
        )
        .await
        .unwrap();
    let base = serve(&app).await;
    let browser = Browser::start().await;
    browser.set_window(1280, 1000).await;

    browser.goto(&format!("{base}/console#/charts")).await;
    browser.fill("#login-email", ADMIN_EMAIL).await;
    browser.fill("#login-password", ADMIN_PASSWORD).await;
    browser.click("#login button[type=submit]").await;
    browser.wait_text("main h1", "Charts").await;
    let summary = browser.wait_text("#charts-summary", "Active members").await;
    assert!(summary.contains('3'), "{summary}");
    let revenue = wait_drawn(&browser, "#chart-revenue-UAH").await;
    let members = wait_drawn(&browser, "#chart-members").await;
    assert!(revenue > 500, "revenue chart drew {revenue} pixels");
    assert!(members > 500, "members chart drew {members} pixels");
    // uPlot's legend names the series; the table beside the chart has the figures.
    let legend = browser.wait_text("#chart-revenue-UAH", "net").await;
    assert!(
        legend.contains("gross") && legend.contains("refunded"),
        "{legend}"
    );
    let figures: Value = browser
        .execute(
            "return [...document.querySelectorAll('#charts-revenue details tbody tr')].map(r => r.textContent)",
            json!([]),
        )
        .await;
    let text = figures.to_string();
    assert!(text.contains("100.00"), "{text}");
    keep(&browser, "15-charts.png", 1280).await;
    assert_eq!(
        figures.as_array().unwrap().len(),
        31,
        "30 days ago to today: {figures}"
    );

    // By week: the form changes the series.
    browser.select("#charts-interval", "week").await;
    browser.click("#charts-range button[type=submit]").await;
    browser.find("#chart-members[data-drawn]").await;
    let weeks = browser
        .execute(
            "return document.querySelectorAll('#charts-members details tbody tr').length",
            json!([]),
        )
        .await
        .as_i64()
        .unwrap();
    assert!((5..=6).contains(&weeks), "{weeks} weeks");

    // On a phone's width the charts fit the screen and still draw.
    browser.set_window(390, 844).await;
    browser.refresh().await;
    browser.fill("#login-email", ADMIN_EMAIL).await;
    browser.fill("#login-password", ADMIN_PASSWORD).await;
    browser.click("#login button[type=submit]").await;
    assert!(wait_drawn(&browser, "#chart-members").await > 300);
    let overflow = browser
        .execute(
            "const c = document.querySelector('#chart-members canvas');
             return c.getBoundingClientRect().right <= document.documentElement.clientWidth;",
            json!([]),
        )
        .await;
    assert_eq!(overflow, json!(true), "the chart fits a phone's screen");
    keep(&browser, "16-phone-charts.png", 390).await;

    // The audit log lists the writes made above, newest last, with what changed.
    browser
        .execute("location.hash = '#/audit-log'", json!([]))
        .await;
    let log = browser.wait_text("#audit-list", "channel.create").await;
    assert!(
        log.contains("order.create") && log.contains(ADMIN_EMAIL),
        "{log}"
    );
    browser.fill("#audit-action", "subscriber.create").await;
    browser.click("#audit-filter button[type=submit]").await;
    browser.wait_text("main h1", "Audit log").await;
    let mut tries = 0;
    let rows = loop {
        tries += 1;
        assert!(
            tries < 100,
            "the filtered audit log never showed three rows"
        );
        let n = browser
            .execute(
                "return [...document.querySelectorAll('#audit-list tbody tr')].map(r => r.textContent)",
                json!([]),
            )
            .await;
        let rows = n.as_array().cloned().unwrap_or_default();
        if rows.len() == 3 {
            break rows;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(
        rows.iter()
            .all(|r| r.to_string().contains("subscriber.create")),
        "{rows:?}"
    );
    browser.set_window(1280, 1000).await;
    keep(&browser, "17-audit-log.png", 1280).await;
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_manages_staff_accounts_and_changes_a_password() {
    let app = TestApp::spawn().await;
    let base = serve(&app).await;
    let browser = Browser::start().await;
    browser.set_window(1280, 1000).await;
    browser.goto(&format!("{base}/console#/staff")).await;
    browser.fill("#login-email", ADMIN_EMAIL).await;
    browser.fill("#login-password", ADMIN_PASSWORD).await;
    browser.click("#login button[type=submit]").await;
    browser.wait_text("#staff-list", ADMIN_EMAIL).await;

    // A weak password is refused next to its field; then the account is made.
    browser.fill("#staff-new-email", "helper@example.com").await;
    browser.select("#staff-new-role", "support").await;
    browser.fill("#staff-new-password", "password123").await;
    browser.click("#staff-new button[type=submit]").await;
    browser
        .wait_text("#staff-new-password-error", "too weak")
        .await;
    browser
        .fill("#staff-new-password", "a long helper passphrase")
        .await;
    browser.click("#staff-new button[type=submit]").await;
    browser
        .wait_text("#status", "Account helper@example.com created (support)")
        .await;
    let row =
        |email: &str| format!("SELECT role, disabled FROM staff_accounts WHERE email = '{email}'");
    let db = app.db().await;
    let r = db.query_one(&row("helper@example.com"), &[]).await.unwrap();
    assert_eq!(r.get::<_, String>("role"), "support");
    let helper: i64 = db
        .query_one(
            "SELECT id FROM staff_accounts WHERE email = 'helper@example.com'",
            &[],
        )
        .await
        .unwrap()
        .get("id");

    // Its role, then disabled.
    browser
        .select(&format!("#staff-role-{helper}"), "viewer")
        .await;
    browser
        .execute(
            "document.querySelector(arguments[0]).closest('td').querySelector('button').click()",
            json!([format!("#staff-role-{helper}")]),
        )
        .await;
    browser
        .wait_text("#status", "helper@example.com is now viewer")
        .await;
    let r = db.query_one(&row("helper@example.com"), &[]).await.unwrap();
    assert_eq!(r.get::<_, String>("role"), "viewer");
    browser.wait_text("#staff-list", "helper@example.com").await;
    browser
        .execute(
            "for (const tr of document.querySelectorAll('#staff-list tbody tr'))
               if (tr.textContent.includes(arguments[0]))
                 [...tr.querySelectorAll('button')].find((b) => b.textContent === 'Disable').click();",
            json!(["helper@example.com"]),
        )
        .await;
    browser
        .wait_text("#status", "helper@example.com is disabled")
        .await;
    let r = db.query_one(&row("helper@example.com"), &[]).await.unwrap();
    assert!(r.get::<_, bool>("disabled"));

    // The owner's own password, from the header's link: the session carries on.
    browser.click("#change-password").await;
    browser.wait_text("main h1", "Change your password").await;
    browser
        .fill("#password-current_password", "not my password")
        .await;
    browser
        .fill("#password-new_password", "a brand new owner passphrase")
        .await;
    browser.click("#password button[type=submit]").await;
    browser
        .wait_text("#password-current_password-error", "not this account")
        .await;
    browser
        .fill("#password-current_password", ADMIN_PASSWORD)
        .await;
    browser
        .fill("#password-new_password", "a brand new owner passphrase")
        .await;
    browser.click("#password button[type=submit]").await;
    browser.wait_text("#status", "Password changed").await;
    browser
        .execute("location.hash = '#/audit-log'", json!([]))
        .await;
    let log = browser
        .wait_text("#audit-list", "staff.change_password")
        .await;
    assert!(
        log.contains("staff.create") && log.contains("staff.update"),
        "{log}"
    );
    app.login(ADMIN_EMAIL, "a brand new owner passphrase")
        .await
        .expect(200);
    browser.quit().await;
}
