//! Every screen of the console, with data in its columns, at a desktop's and a phone's width:
//! none may show what a person would see as broken (`[object …]`, `null`, `undefined`, `NaN`,
//! `Invalid Date`) or log an error in the browser's console ([`Browser::check_screen`]). The
//! data is made so that each list has rows: a channel edited (an audit-log row with a changed
//! field), one made and one removed, payments applied and held for review, memberships, effects,
//! a plan and a promo code, a webhook endpoint with a delivery, a card order being chased at
//! WayForPay, a scheduled broadcast, an affiliate with a commission line, join requests at the
//! channel's door (one waiting, one approved), and a second staff account; and no channel where
//! the bot lost its rights.
//!
//! A second test shows the guard itself failing on a page that does show those things.

use std::time::Duration;

use futures::FutureExt;
use serde_json::json;

use crate::{
    console::walk::serve,
    payments::reconciliation::{card_link, due, pass},
    support::{
        browser::Browser,
        effects::{grant, run},
        fake_bot::{FakeBot, TOKEN},
        fake_wayforpay::{FakeWayForPay, Script},
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, TestApp, id, payment_event},
    },
};

/// The desktop and phone widths every screen is seen at.
const WIDTHS: [(u32, u32); 2] = [(1280, 1000), (390, 844)];

/// An app with the fake Bot API and WayForPay, as in `reconciliation.rs`, that may send webhooks
/// to this machine.
async fn app_with(bot: &FakeBot, wfp: &FakeWayForPay) -> TestApp {
    let (bot_url, wfp_url) = (bot.url.clone(), wfp.url.clone());
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), bot_url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
        env.insert("TELEGRAM_BOT_USERNAME".into(), "subgate_test_bot".into());
        env.insert("PUBLIC_URL".into(), "https://pay.example.com".into());
        env.insert("WAYFORPAY_API_URL".into(), wfp_url);
        env.insert("RECONCILE_AFTER_SECS".into(), "600".into());
        // The webhook endpoint is on this machine; nothing is delivered to it.
        env.insert("OUTBOUND_ALLOW_PRIVATE".into(), "true".into());
    })
    .await
}

/// The ids the screens are visited with.
struct Made {
    channel: i64,
    subscriber: i64,
    plan: i64,
    promo: i64,
    endpoint: i64,
    broadcast: i64,
    affiliate: i64,
    payment: i64,
}

/// Something in every list of the console.
async fn make_data(app: &TestApp, wfp: &FakeWayForPay) -> Made {
    // A card order the bot sent a link for, asked about at WayForPay: being chased, with its
    // answer shown.
    let (order, reference, _) = card_link(app, 8_401).await;
    wfp.script(&reference, Script::status("Declined", "199.00"));
    due(app, order).await;
    pass(app).await;

    // A webhook endpoint first, so the payments below are events delivered to it.
    let endpoint = id(&app
        .post(
            "/api/webhook-endpoints",
            json!({"url": "http://127.0.0.1:9/crm-hooks", "event_types": ["payment.applied"],
                   "description": "CRM"}),
        )
        .await
        .expect(201));

    let channel = id(&app
        .create_channel(
            -1_001_000_084_001,
            json!({"title": "Signals", "seat_limit": 10, "grace_period_days": 2}),
        )
        .await);
    app.patch(
        &format!("/api/channels/{channel}"),
        json!({"description": "Daily signals.", "price_minor": 24_900}),
    )
    .await
    .expect(200);

    let ann = id(&app
        .post(
            "/api/subscribers",
            json!({"telegram_user_id": 84_001, "username": "ann", "display_name": "Ann K."}),
        )
        .await
        .expect(201));
    grant(app, ann, channel, 30).await;
    let paid = app.create_order(ann, channel).await;
    let payment = app.pay_order(&paid, "screens-pay-1").await.expect(200)["payment"]["id"]
        .as_i64()
        .unwrap();
    // A payment held for review: the amount differs from the order's.
    let bob = id(&app.create_subscriber(84_002).await);
    let short = app.create_order(bob, channel).await;
    let r = app
        .post_signed_webhook(&payment_event(
            "screens-short-1",
            short["reference"].as_str().unwrap(),
            10_000,
            "UAH",
        ))
        .await
        .expect(200);
    assert_eq!(r["payment"]["outcome"], "needs_review");
    // A membership made and removed: the audit log's "removed" row, and a revoke effect.
    let cat = id(&app.create_subscriber(84_003).await);
    let gone = grant(app, cat, channel, 5).await;
    app.delete(&format!("/api/memberships/{gone}"))
        .await
        .expect(204);
    // The effects run against the fake Bot API, so the list has done ones.
    run(app).await;

    let plan = id(&app
        .post(
            "/api/plans",
            json!({"title": "Signals yearly", "channel_ids": [channel], "price_minor": 150_000,
                   "currency": "UAH", "period_days": 365}),
        )
        .await
        .expect(201));
    let promo = id(&app
        .post(
            "/api/promo-codes",
            json!({"code": "SPRING25", "percent_off": 25, "plan_ids": [plan],
                   "max_redemptions": 10}),
        )
        .await
        .expect(201));
    // A broadcast scheduled for later, to the channel's members who read Ukrainian.
    let broadcast = id(&app
        .post(
            "/api/broadcasts",
            json!({"texts": {"en": "Sale on Friday", "uk": "Розпродаж у пʼятницю"},
                   "segment": {"channel_ids": [channel], "languages": ["uk"]},
                   "button": {"plan_id": plan, "promo_code": "SPRING25"},
                   "send_at": "2030-01-15T10:00:00Z", "paid": {"max_stars": 50}}),
        )
        .await
        .expect(201));
    // An affiliate whose buyer's payment earned a commission line (as the payment core writes
    // it), for the Referrals screens.
    let affiliate = id(&app
        .post(
            "/api/affiliates",
            json!({"name": "Partner", "code": "PARTNER"}),
        )
        .await
        .expect(201));
    app.db()
        .await
        .execute(
            "INSERT INTO commission_lines (affiliate_id, payment_id, subscriber_id, kind,
                                           amount_minor, currency, percent, base_minor,
                                           payable_at)
             SELECT $1::bigint, id, subscriber_id, 'first', amount_minor / 5, currency, 20,
                    amount_minor, now() + interval '14 days'
               FROM payments WHERE external_id = 'screens-pay-1'",
            &[&affiliate],
        )
        .await
        .unwrap();
    // Join requests at the channel's door, as the door records them: Ann waiting with the Mini
    // App open, someone else let in at once.
    app.db()
        .await
        .execute(
            "INSERT INTO join_requests (channel_id, chat_id, user_id, query_id, reference, answer,
                                        state, requested_at, decided_at, answered_at)
             SELECT id, telegram_chat_id, 84001, 'screens-query-1', 'screens-ref-1', 'web_app',
                    'waiting', now(), NULL, NULL
               FROM channels WHERE id = $1::bigint
             UNION ALL
             SELECT id, telegram_chat_id, 84009, 'screens-query-2', 'screens-ref-2', 'approve',
                    'approved', now(), now(), now()
               FROM channels WHERE id = $1::bigint",
            &[&channel],
        )
        .await
        .unwrap();
    app.post(
        "/api/staff",
        json!({"email": "helper@example.com", "role": "support",
               "password": "a long helper passphrase"}),
    )
    .await
    .expect(201);
    Made {
        channel,
        subscriber: ann,
        plan,
        promo,
        endpoint,
        broadcast,
        affiliate,
        payment,
    }
}

/// Goes to `hash` (in the page, so the session stays), waits for `needle` in `css`, lets the
/// screen settle (its text unchanged for a moment: every section has drawn), and checks it.
async fn visit(browser: &Browser, hash: &str, css: &str, needle: &str) {
    browser
        .execute("location.hash = arguments[0];", json!([hash]))
        .await;
    browser.wait_text(css, needle).await;
    let mut last = String::new();
    let mut same = 0;
    let deadline = tokio::time::Instant::now() + crate::support::browser::WAIT;
    while same < 3 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = browser.page_text().await;
        same = if now == last { same + 1 } else { 0 };
        last = now;
        assert!(
            tokio::time::Instant::now() < deadline,
            "{hash} never settled"
        );
    }
    let width = browser
        .execute("return window.innerWidth;", json!([]))
        .await;
    browser.check_screen(&format!("{hash} at {width}px")).await;
    // Nothing wider than the screen: a phone would scroll sideways.
    assert_eq!(
        browser.wider_than_screen().await,
        None,
        "{hash} at {width}px is wider than the screen (scroll width, client width)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_screen_shows_no_broken_text_and_logs_no_error() {
    let (bot, wfp) = (FakeBot::start().await, FakeWayForPay::start().await);
    let app = app_with(&bot, &wfp).await;
    let made = make_data(&app, &wfp).await;
    let base = serve(&app).await;
    let browser = Browser::start().await;
    let walked = std::panic::AssertUnwindSafe(async {
        let Made {
            channel,
            subscriber,
            plan,
            promo,
            endpoint,
            broadcast,
            affiliate,
            payment,
        } = made;
        let screens: Vec<(String, &str, &str)> = vec![
            ("#/overview".into(), "main", "Members by channel"),
            (
                format!("#/payments/{payment}"),
                "main",
                "refunded at the gateway",
            ),
            (
                "#/overview".into(),
                "#ov-doors-list",
                "Fiscal receipts (Checkbox)",
            ),
            ("#/channels".into(), "main table", "Signals"),
            ("#/channels/new".into(), "main h1", "New channel"),
            (
                format!("#/channels/{channel}"),
                "#channel-plans",
                "Signals yearly",
            ),
            (
                format!("#/channels/{channel}/audit"),
                "#audit-report",
                "not been audited",
            ),
            ("#/plans".into(), "main table", "Signals yearly"),
            ("#/plans/new".into(), "main h1", "New plan"),
            (format!("#/plans/{plan}"), "main h1", "Plan: Signals yearly"),
            ("#/promo-codes".into(), "main table", "SPRING25"),
            ("#/promo-codes/new".into(), "main h1", "New promo code"),
            (
                format!("#/promo-codes/{promo}"),
                "main h1",
                "Promo code SPRING25",
            ),
            ("#/subscribers".into(), "main table", "@ann"),
            ("#/subscribers?q=ann".into(), "main", "Results for"),
            (
                format!("#/subscribers/{subscriber}"),
                "#sub-payments + *",
                "applied",
            ),
            ("#/broadcasts".into(), "main table", "Sale on Friday"),
            (
                "#/broadcasts/new".into(),
                "#broadcast-preview",
                "would get it now",
            ),
            (
                format!("#/broadcasts/{broadcast}"),
                "#broadcast-status",
                "scheduled",
            ),
            (
                "#/automations".into(),
                "#auto-renewal_failed",
                "Renewal failed",
            ),
            ("#/referrals".into(), "#affiliate-list table", "PARTNER"),
            (
                format!("#/referrals/affiliates/{affiliate}"),
                "#affiliate-lines table",
                "first purchase",
            ),
            ("#/door".into(), "#door-list table", "Mini App opened"),
            (
                "#/door?state=".into(),
                "#door-list table",
                "Approved at once",
            ),
            ("#/memberships".into(), "main table", "active"),
            ("#/payments".into(), "main table", "needs_review"),
            ("#/payments?outcome=applied".into(), "main table", "applied"),
            ("#/reconciliation".into(), "main table", "Declined"),
            ("#/effects".into(), "main h1", "Telegram effects"),
            ("#/effects?status=".into(), "main table", "revoke"),
            ("#/webhooks".into(), "main table", "crm-hooks"),
            (
                format!("#/webhooks/{endpoint}"),
                "main table",
                "payment.applied",
            ),
            ("#/charts".into(), "#charts-summary", "Active members"),
            ("#/sweep".into(), "main h1", "Sweep"),
            ("#/audit-log".into(), "#audit-list", "membership.delete"),
            ("#/staff".into(), "#staff-list", "helper@example.com"),
            ("#/password".into(), "main h1", "Change your password"),
            ("#/no-such-page".into(), "main", "There is no such page"),
        ];

        browser.goto(&format!("{base}/console#/overview")).await;
        browser.wait_text("main h1", "Sign in").await;
        browser.fill("#login-email", ADMIN_EMAIL).await;
        browser.fill("#login-password", ADMIN_PASSWORD).await;
        browser.click("#login button[type=submit]").await;
        browser.wait_text("main h1", "Overview").await;
        for (width, height) in WIDTHS {
            browser.set_window(width, height).await;
            for (hash, css, needle) in &screens {
                visit(&browser, hash, css, needle).await;
            }
        }
        // The audit log's "Change" column: what the edit changed, field by field.
        browser.set_window(1280, 1000).await;
        visit(
            &browser,
            "#/audit-log?action=channel.update",
            "#audit-list",
            "price_minor",
        )
        .await;
        let change = browser
            .wait_text("#audit-list td[data-label='Change']", "price_minor")
            .await;
        assert!(change.contains("19900 → 24900"), "{change}");
        assert!(
            change.contains("description: — → Daily signals."),
            "{change}"
        );
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

/// The guard fails where a person would see a broken screen: text with `[object …]`, `null` or
/// `undefined` in it, an error in the browser's console, a page wider than the screen; and
/// passes the sign-in screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_screen_check_fails_on_broken_text_and_console_errors() {
    let app = TestApp::spawn().await;
    let base = serve(&app).await;
    let browser = Browser::start().await;
    browser.goto(&format!("{base}/console")).await;
    browser.wait_text("main h1", "Sign in").await;
    assert_eq!(browser.broken_text().await, Vec::<String>::new());
    assert_eq!(browser.console_errors().await, Vec::<String>::new());

    for shown in ["[object Promise]", "null", "Expires: undefined"] {
        browser
            .execute(
                "const p = document.createElement('p'); p.id = 'bad'; p.textContent = arguments[0];
                 document.querySelector('main').append(p);",
                json!([shown]),
            )
            .await;
        let found = browser.broken_text().await;
        assert_eq!(found, vec![format!("text: {shown}")]);
        browser
            .execute("document.getElementById('bad').remove();", json!([]))
            .await;
    }
    // Words that merely contain the letters are not findings.
    browser
        .execute(
            "document.querySelector('main').append('Nullable fields, annulled orders.');",
            json!([]),
        )
        .await;
    assert_eq!(browser.broken_text().await, Vec::<String>::new());

    browser
        .execute("console.error('the console broke');", json!([]))
        .await;
    browser
        .execute(
            "setTimeout(() => { throw new Error('thrown later'); });",
            json!([]),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let errors = browser.console_errors().await;
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("the console broke"), "{errors:?}");
    assert!(errors[1].contains("thrown later"), "{errors:?}");
    // The log is read once: the next check starts clean.
    assert_eq!(browser.console_errors().await, Vec::<String>::new());

    // A page wider than the screen.
    assert_eq!(browser.wider_than_screen().await, None);
    browser
        .execute(
            "const d = document.createElement('div'); d.id = 'wide'; d.style.width = '3000px';
             d.textContent = 'wide'; document.querySelector('main').append(d);",
            json!([]),
        )
        .await;
    assert!(browser.wider_than_screen().await.is_some());
    browser
        .execute("document.getElementById('wide').remove();", json!([]))
        .await;

    // check_screen itself panics on both.
    browser
        .execute("console.error('once more');", json!([]))
        .await;
    let checked = std::panic::AssertUnwindSafe(browser.check_screen("the guard"))
        .catch_unwind()
        .await;
    assert!(checked.is_err(), "a console error fails the check");
    browser.close().await;
}
