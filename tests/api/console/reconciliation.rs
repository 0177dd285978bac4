//! The console's Reconciliation view in a real browser: card orders asked about at WayForPay —
//! one found, one still chased after a declined answer, one whose answer was not believed —
//! with the counts per state, what WayForPay last said, and the state filter.

use futures::FutureExt;

use crate::{
    console::walk::serve,
    payments::reconciliation::{app_with, card_link, due, pass},
    support::{
        browser::Browser,
        fake_bot::FakeBot,
        fake_wayforpay::{FakeWayForPay, Script},
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD},
    },
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_what_is_chased_and_what_was_found() {
    let (bot, wfp) = (FakeBot::start().await, FakeWayForPay::start().await);
    let app = app_with(&bot, &wfp).await;
    let (found, found_ref, _) = card_link(&app, 8201).await;
    let (declined, declined_ref, _) = card_link(&app, 8202).await;
    let (forged, forged_ref, _) = card_link(&app, 8203).await;
    wfp.script(&found_ref, Script::status("Approved", "199.00"));
    wfp.script(&declined_ref, Script::status("Declined", "199.00"));
    wfp.script(
        &forged_ref,
        Script::BadSignature {
            status: "Approved".into(),
            amount: "199.00".into(),
        },
    );
    for order in [found, declined, forged] {
        due(&app, order).await;
    }
    assert_eq!(pass(&app).await.found, 1);

    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        browser
            .goto(&format!("{base}/console#/reconciliation"))
            .await;
        browser.fill("#login-email", ADMIN_EMAIL).await;
        browser.fill("#login-password", ADMIN_PASSWORD).await;
        browser.click("#login button[type=submit]").await;
        browser.wait_text("main h1", "Reconciliation").await;
        let counts = browser
            .wait_text("#reconciliation-counts", "Being chased")
            .await;
        assert!(counts.contains("Being chased\n2"), "{counts}");
        assert!(counts.contains("Found\n1"), "{counts}");
        let rows = browser.wait_text("main table", &found_ref).await;
        assert!(rows.contains(&declined_ref), "{rows}");
        assert!(rows.contains("Declined"), "{rows}");
        assert!(rows.contains("merchantSignature does not verify"), "{rows}");
        assert!(rows.contains("found"), "{rows}");

        // Only what was found.
        browser.select("#rfilter-state", "found").await;
        browser.click("#rfilter button[type=submit]").await;
        let deadline = tokio::time::Instant::now() + crate::support::browser::WAIT;
        loop {
            let text = browser.wait_text("main table", &found_ref).await;
            if !text.contains(&declined_ref) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the filter applies: {text}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let payment: i64 = app
            .db()
            .await
            .query_one("SELECT id FROM payments", &[])
            .await
            .unwrap()
            .get(0);
        browser
            .wait_text("main table", &format!("#{payment}"))
            .await;
    })
    .catch_unwind()
    .await;
    match walked {
        Ok(()) => browser.quit().await,
        Err(panic) => {
            browser.close().await;
            std::panic::resume_unwind(panic);
        }
    }
}
