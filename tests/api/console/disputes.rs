//! The console's Payments view in a real browser: Stripe disputes — a disputed payment is
//! offered in the outcome filter and explained in words, and a won dispute waits in
//! `needs_review` with its explanation and the "Grant … by hand" that gives the access back —
//! and each payment's fiscal receipt: done with a link to its page, being registered, or failed
//! with the way to its error.

use futures::FutureExt;

use crate::{
    console::walk::serve,
    payments::receipts::{self as receipts_tests, payment_of},
    payments::stripe::{order, post_event, stripe_app},
    support::{
        browser::Browser,
        effects::run_until_done,
        fake_bot::FakeBot,
        fake_checkbox::FakeCheckbox,
        fake_stripe::{checkout_session, dispute, event},
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, reference},
    },
};

/// Pays `intent` for a new order and opens a dispute of it; returns the order's reference.
async fn disputed(
    app: &crate::support::helpers::TestApp,
    user: i64,
    chat: i64,
    intent: &str,
) -> String {
    let (_, o) = order(app, user, chat).await;
    let r = reference(&o);
    post_event(
        app,
        &event(
            "checkout.session.completed",
            checkout_session(&r, intent, 19900, "uah", "paid"),
        ),
    )
    .await
    .expect(200);
    post_event(
        app,
        &event("charge.dispute.created", dispute(intent, "needs_response")),
    )
    .await
    .expect(200);
    r
}

/// Fails on what a person would see as broken in `text`.
fn looks_whole(text: &str) {
    for broken in ["undefined", "[object", "null", "NaN"] {
        assert!(!text.contains(broken), "{broken:?} shown: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_explains_disputes_and_offers_the_grant_for_a_won_one() {
    let app = stripe_app("http://127.0.0.1:9").await;
    let open = disputed(&app, 8501, -100_850_001, "pi_console_open").await;
    let won = disputed(&app, 8502, -100_850_002, "pi_console_won").await;
    post_event(
        &app,
        &event("charge.dispute.closed", dispute("pi_console_won", "won")),
    )
    .await
    .expect(200);

    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        browser.goto(&format!("{base}/console#/payments")).await;
        browser.fill("#login-email", ADMIN_EMAIL).await;
        browser.fill("#login-password", ADMIN_PASSWORD).await;
        browser.click("#login button[type=submit]").await;
        browser.wait_text("main h1", "Payments").await;

        // needs_review first: the won dispute, in words, with the grant.
        let text = browser
            .wait_text("main table", "The dispute was decided for you")
            .await;
        assert!(text.contains(&won), "{text}");
        assert!(!text.contains(&open), "{text}");
        assert!(text.contains("Grant the days by hand"), "{text}");
        looks_whole(&text);
        browser.find("main table a[href*='grant_channel=']").await;

        // The disputed one, under its own outcome.
        browser.select("#pfilter-outcome", "disputed").await;
        browser.click("#pfilter button[type=submit]").await;
        let text = browser
            .wait_text("main table", "disputed the charge with their bank")
            .await;
        assert!(text.contains(&open), "{text}");
        assert!(!text.contains(&won), "{text}");
        assert!(
            text.contains("Answer the dispute in the Stripe dashboard"),
            "{text}"
        );
        looks_whole(&text);
    })
    .catch_unwind()
    .await;
    browser.quit().await;
    if let Err(panic) = walked {
        std::panic::resume_unwind(panic);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_each_payment_s_receipt_as_it_stands() {
    let (bot, checkbox) = (FakeBot::start().await, FakeCheckbox::start().await);
    let app = receipts_tests::app(&bot, Some(&checkbox)).await;
    let json = serde_json::json!({});
    // Done.
    let done = receipts_tests::order(&app, 8601, -100_860_001, json.clone()).await;
    app.pay_order(&done, "pay_console_done").await.expect(200);
    run_until_done(&app).await;
    // Refused by Checkbox: failed.
    checkbox.refuse_receipts(true);
    let failed = receipts_tests::order(&app, 8602, -100_860_002, json.clone()).await;
    app.pay_order(&failed, "pay_console_failed")
        .await
        .expect(200);
    run_until_done(&app).await;
    // Being retried: pending.
    checkbox.refuse_receipts(false);
    checkbox.fail_next_sells(1000);
    let pending = receipts_tests::order(&app, 8603, -100_860_003, json).await;
    app.pay_order(&pending, "pay_console_pending")
        .await
        .expect(200);
    crate::support::effects::run(&app).await;
    let receipt_id: String = app
        .db()
        .await
        .query_one(
            "SELECT receipt_id::text FROM fiscal_receipts WHERE payment_id = $1",
            &[&payment_of(&app, &done).await],
        )
        .await
        .unwrap()
        .get(0);

    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        browser
            .goto(&format!("{base}/console#/payments?outcome=applied"))
            .await;
        browser.fill("#login-email", ADMIN_EMAIL).await;
        browser.fill("#login-password", ADMIN_PASSWORD).await;
        browser.click("#login button[type=submit]").await;
        browser.wait_text("main h1", "Payments").await;
        let text = browser.wait_text("main table", "Open receipt").await;
        assert!(text.contains("Checkbox did not register it"), "{text}");
        assert!(text.contains("being registered with Checkbox"), "{text}");
        assert_eq!(text.matches("Open receipt").count(), 1, "{text}");
        looks_whole(&text);
        let link = browser
            .find(&format!(
                "main table a[href='https://check.checkbox.ua/{receipt_id}']"
            ))
            .await;
        assert_eq!(browser.text(&link).await, "Open receipt");
        // The failed one leads to its error.
        browser
            .find("main table a[href*='kind=fiscal_receipt'][href*='status=failed']")
            .await;
        browser.check_screen("payments with receipts").await;
        crate::console::charts::keep(&browser, "39-payments-receipts.png", 1280).await;
        crate::console::charts::keep(&browser, "40-phone-payments-receipts.png", 390).await;
    })
    .catch_unwind()
    .await;
    browser.quit().await;
    if let Err(panic) = walked {
        std::panic::resume_unwind(panic);
    }
}
