//! The console's Refund button in a real browser: on the Payments screen an owner refunds a
//! Stripe payment — the button asks why, the refund's state shows in its place — and once
//! the fake Stripe has made the refund and the worker recorded it, the payment's own page says
//! it is refunded. A support account sees no Refund button; the overview lists the payment
//! doors that are live.

use futures::FutureExt;
use serde_json::json;

use crate::{
    console::{charts::keep, walk::serve},
    payments::stripe::{order, post_event, session_completed},
    support::{
        browser::Browser,
        effects::run,
        fake_bot::{FakeBot, TOKEN},
        fake_stripe::{self, FakeStripe},
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, TestApp, reference},
    },
};

/// An app selling through the fake Stripe, with the fake Bot API for the worker.
async fn app(bot: &FakeBot, stripe: &FakeStripe) -> TestApp {
    let (bot_url, stripe_url) = (bot.url.clone(), stripe.url.clone());
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), bot_url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
        env.insert("STRIPE_SECRET_KEY".into(), fake_stripe::SECRET_KEY.into());
        env.insert(
            "STRIPE_WEBHOOK_SECRET".into(),
            fake_stripe::WEBHOOK_SECRET.into(),
        );
        env.insert("STRIPE_API_URL".into(), stripe_url);
    })
    .await
}

async fn sign_in(browser: &Browser, base: &str, hash: &str, email: &str, password: &str) {
    browser.goto(&format!("{base}/console#{hash}")).await;
    browser.fill("#login-email", email).await;
    browser.fill("#login-password", password).await;
    browser.click("#login button[type=submit]").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staff_refund_a_payment_from_the_payments_screen_and_see_it_refunded() {
    let (bot, stripe) = (FakeBot::start().await, FakeStripe::start().await);
    let app = app(&bot, &stripe).await;
    let (_, o) = order(&app, 8601, -100_860_001).await;
    post_event(
        &app,
        &session_completed(&reference(&o), "pi_console_refund", 19900, "uah"),
    )
    .await
    .expect(200);
    let payment: i64 = app
        .db()
        .await
        .query_one(
            "SELECT id FROM payments WHERE external_id = 'pi_console_refund'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        sign_in(&browser, &base, "/overview", ADMIN_EMAIL, ADMIN_PASSWORD).await;
        browser.wait_text("main h1", "Overview").await;
        let doors = browser.wait_text("#ov-doors-list", "Stripe").await;
        assert!(
            doors.contains("Monobank") && doors.contains("Fiscal receipts"),
            "{doors}"
        );
        browser.find("#door-stripe .badge.active").await;
        browser.find("#door-monobank .badge.expired").await;
        browser.check_screen("the overview").await;

        browser
            .execute("location.hash = '#/payments?outcome=applied';", json!([]))
            .await;
        browser.wait_text("main table", "pi_console_refund").await;
        browser.click(&format!("#refund-open-{payment}")).await;
        // Asking without a reason is refused in place.
        browser
            .click(&format!("#refund-form-{payment} button[type=submit]"))
            .await;
        browser
            .wait_text(
                &format!("#refund-form-{payment}-reason-error"),
                "Say why the money goes back",
            )
            .await;
        browser
            .fill(
                &format!("#refund-form-{payment}-reason"),
                "Bought by mistake",
            )
            .await;
        browser
            .click(&format!("#refund-form-{payment} button[type=submit]"))
            .await;
        let state = browser
            .wait_text(&format!("#refund-state-{payment}"), "refund pending")
            .await;
        assert!(state.contains("Bought by mistake"), "{state}");
        assert!(state.contains("the gateway is being asked"), "{state}");
        browser
            .check_screen("the payments screen after the refund")
            .await;
        keep(&browser, "35-payments-refund-pending.png", 1280).await;
        keep(&browser, "36-phone-payments-refund-pending.png", 390).await;
        assert_eq!(app.count("effects WHERE kind = 'gateway_refund'").await, 1);

        // The fake Stripe makes the refund; the worker records it.
        run(&app).await;
        assert_eq!(stripe.refunds(), vec!["pi_console_refund".to_string()]);

        browser
            .execute(
                "location.hash = arguments[0];",
                json!([format!("#/payments/{payment}")]),
            )
            .await;
        let page = browser.wait_text("main", "refund done").await;
        assert!(page.contains("refunded"), "{page}");
        assert!(
            page.contains("Refunded by staff through the gateway"),
            "{page}"
        );
        assert!(page.contains("Bought by mistake"), "{page}");
        assert!(
            !page.contains("Refund…"),
            "no second refund is offered: {page}"
        );
        browser.check_screen("the refunded payment").await;
        keep(&browser, "37-payment-refunded.png", 1280).await;
        keep(&browser, "38-phone-payment-refunded.png", 390).await;

        // The refunded payment is listed under its outcome, without a Refund button.
        browser
            .execute("location.hash = '#/payments?outcome=refunded';", json!([]))
            .await;
        browser.wait_text("main table", "pi_console_refund").await;
        let buttons = browser
            .execute(
                "return document.querySelectorAll('[id^=refund-open-]').length;",
                json!([]),
            )
            .await;
        assert_eq!(buttons, json!(0));
    })
    .catch_unwind()
    .await;
    browser.quit().await;
    if let Err(panic) = walked {
        std::panic::resume_unwind(panic);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn support_staff_see_no_refund_button() {
    let (bot, stripe) = (FakeBot::start().await, FakeStripe::start().await);
    let app = app(&bot, &stripe).await;
    let (_, o) = order(&app, 8602, -100_860_002).await;
    post_event(
        &app,
        &session_completed(&reference(&o), "pi_console_support", 19900, "uah"),
    )
    .await
    .expect(200);
    app.token_of_role("support").await;
    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        sign_in(
            &browser,
            &base,
            "/payments?outcome=applied",
            "support.staff@example.com",
            "the support passphrase",
        )
        .await;
        browser.wait_text("main table", "pi_console_support").await;
        let buttons = browser
            .execute(
                "return document.querySelectorAll('[id^=refund-open-]').length;",
                json!([]),
            )
            .await;
        assert_eq!(buttons, json!(0), "support may not refund");
        browser
            .check_screen("the payments screen for support")
            .await;
    })
    .catch_unwind()
    .await;
    browser.quit().await;
    if let Err(panic) = walked {
        std::panic::resume_unwind(panic);
    }
}
