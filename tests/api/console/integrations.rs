//! The console's Webhooks screens and CSV downloads in a real browser: an endpoint made (its
//! secret shown once), an event delivered to a local receiver, the delivery and its attempt
//! listed and replayed, the secret rotated, and the payments CSV fetched with the session.

use futures::FutureExt;

use crate::{
    console::walk::serve,
    outbox::outbound::{Receiver, app, deliver, paid_order},
    support::{
        browser::Browser,
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD},
    },
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_endpoints_and_csv_downloads_in_the_console() {
    let app = app().await;
    let receiver = Receiver::start().await;
    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        browser.goto(&format!("{base}/console#/webhooks")).await;
        browser.fill("#login-email", ADMIN_EMAIL).await;
        browser.fill("#login-password", ADMIN_PASSWORD).await;
        browser.click("#login button[type=submit]").await;
        browser.wait_text("main h1", "Webhooks").await;

        // Refused as the API refuses: no event type.
        browser.fill("#wform-url", &receiver.url).await;
        browser.click("#wform button[type=submit]").await;
        browser
            .wait_text("#wform-event_types-error", "at least one event type")
            .await;
        browser.click("#wform-type-payment-applied").await;
        // The referral events are offered too, and the API takes them.
        browser.click("#wform-type-payout-recorded").await;
        browser.fill("#wform-description", "CRM").await;
        browser.click("#wform button[type=submit]").await;
        browser
            .wait_text("#webhook-secret", "not shown again")
            .await;
        let secret = browser
            .value(&browser.find("#webhook-secret-text").await)
            .await;
        assert!(secret.starts_with("whsec_"), "{secret}");
        let endpoints = browser.wait_text("main table", &receiver.url).await;
        assert!(
            endpoints.contains("payment.applied") && endpoints.contains("payout.recorded"),
            "{endpoints}"
        );
        for t in [
            "referral-attributed",
            "commission-created",
            "commission-reversed",
            "payout-recorded",
        ] {
            browser.find(&format!("#wform-type-{t}")).await;
        }

        // An event, delivered and verified with the secret the console showed.
        paid_order(&app, 9301, -100_930_001).await;
        deliver(&app).await;
        let got = receiver.got();
        assert_eq!(got.len(), 1);
        standardwebhooks::Webhook::new(&secret)
            .unwrap()
            .verify(&got[0].body, &got[0].headers)
            .unwrap();

        browser.click("main table a.button").await;
        browser.wait_text("main h1", "Deliveries to").await;
        let rows = browser.wait_text("main table", "delivered").await;
        assert!(rows.contains("payment.applied"), "{rows}");
        assert!(rows.contains("HTTP 200"), "{rows}");
        browser.click("main table button").await;
        browser.wait_text("#status", "will be sent again now").await;
        browser.wait_text("main table", "pending").await;

        // Rotation shows the new secret once.
        browser.click("#nav a[href='#/webhooks']").await;
        browser.wait_text("main table", &receiver.url).await;
        browser
            .click("main table button[aria-label='Rotate secret endpoint #1']")
            .await;
        browser
            .wait_text("#webhook-secret", "old one also signs")
            .await;
        let rotated = browser
            .value(&browser.find("#webhook-secret-text").await)
            .await;
        assert!(rotated.starts_with("whsec_") && rotated != secret);

        // The payments CSV of what the filter shows, fetched with the session's token.
        browser.click("#nav a[href='#/payments']").await;
        browser.wait_text("main h1", "Payments").await;
        browser.select("#pfilter-outcome", "applied").await;
        browser.click("#pfilter button[type=submit]").await;
        browser.wait_text("main table", "applied").await;
        browser.click("button.csv").await;
        browser
            .wait_text("#status", "Downloaded payments.csv: 1 row.")
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
