//! The console's Payments view of Stripe disputes in a real browser: a disputed payment is
//! offered in the outcome filter and explained in words, and a won dispute waits in
//! `needs_review` with its explanation and the "Grant … by hand" that gives the access back.

use futures::FutureExt;

use crate::{
    console::walk::serve,
    payments::stripe::{order, post_event, stripe_app},
    support::{
        browser::Browser,
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
