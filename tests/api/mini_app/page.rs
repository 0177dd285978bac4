//! The Mini App's page (`/app/`) as a buyer sees it inside Telegram, in headless Chromium
//! against the real router on a local port.
//!
//! Chromium here cannot load `https://telegram.org/js/telegram-web-app.js` (and a test must not
//! depend on it), so that URL is blocked and a stand-in for `Telegram.WebApp` is run before the
//! page's own scripts (the page uses a `window.Telegram` it finds as it is): its `initData` is
//! signed with the test bot's token exactly as Telegram signs it ([`init_data`]), and it records
//! what the page asks of Telegram (`openInvoice`, `openLink`, confirmations) in
//! `window.__telegram`; the test closes an invoice with `window.__closeInvoice(status)` after
//! paying its order through the Telegram door, as Telegram would.
//!
//! Every screen waited for is checked for what a person would see as broken (`null`,
//! `undefined`, `[object …]`, `NaN`, a console error), at a phone's width (360 px) without
//! sideways scrolling.

use axum::{body::Body, http::Method};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use subgate::api::app_page::CSP;

use crate::{
    bot::conversation::payment_update,
    console::{charts::keep, walk::serve},
    support::{
        browser::Browser,
        effects::run,
        fake_bot::{FakeBot, TOKEN},
        helpers::{NewPlan, TestApp},
    },
};

/// Telegram's script, which the page loads and the tests block.
const TELEGRAM_JS: &str = "https://telegram.org/js/telegram-web-app.js";

/// A phone's width, in CSS pixels.
const PHONE: (u32, u32) = (360, 740);

/// Telegram's dark theme, as `Telegram.WebApp.themeParams`.
fn dark_theme() -> Value {
    json!({"bg_color": "#17212b", "text_color": "#f5f5f5", "hint_color": "#708499",
           "link_color": "#6ab3f3", "button_color": "#5288c1", "button_text_color": "#ffffff",
           "secondary_bg_color": "#232e3c"})
}

/// Launch data as Telegram signs it for the bot `token`: the fields' data-check string (each
/// `key=value`, sorted by key, joined by newlines), `secret = HMAC_SHA256(key "WebAppData",
/// token)`, `hash = hex(HMAC_SHA256(key secret, data-check string))`, all URL-encoded.
pub(crate) fn init_data(token: &str, user: i64, language: &str, auth_date: i64) -> String {
    let user_json = json!({"id": user, "first_name": "Olena", "last_name": "K",
                           "username": format!("olena{user}"), "language_code": language,
                           "allows_write_to_pm": true})
    .to_string();
    let mut fields = [
        ("auth_date", auth_date.to_string()),
        ("query_id", format!("AAH{user}")),
        ("user", user_json),
    ];
    fields.sort();
    let check = fields
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut secret = Hmac::<Sha256>::new_from_slice(b"WebAppData").unwrap();
    secret.update(token.as_bytes());
    let secret = secret.finalize().into_bytes();
    let mut mac = Hmac::<Sha256>::new_from_slice(&secret).unwrap();
    mac.update(check.as_bytes());
    let hash = hex::encode(mac.finalize().into_bytes());
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in &fields {
        out.append_pair(k, v);
    }
    out.append_pair("hash", &hash);
    out.finish()
}

/// What the stand-in of `Telegram.WebApp` starts with.
struct Launch {
    /// `initData`; empty: the page was opened outside Telegram.
    init_data: String,
    /// `initDataUnsafe.user.language_code`.
    language: &'static str,
    theme: Value,
    scheme: &'static str,
}

impl Launch {
    fn signed(user: i64, language: &'static str) -> Launch {
        Launch {
            init_data: init_data(TOKEN, user, language, chrono::Utc::now().timestamp()),
            language,
            theme: json!({}),
            scheme: "light",
        }
    }

    fn dark(self) -> Launch {
        Launch {
            theme: dark_theme(),
            scheme: "dark",
            ..self
        }
    }

    /// The stand-in's source: `window.Telegram.WebApp` with the calls the page makes.
    fn script(&self) -> String {
        let unsafe_data = json!({"user": {"id": 1, "language_code": self.language}});
        format!(
            "(() => {{
               const calls = {{invoices: [], links: [], confirms: [], ready: 0, expand: 0}};
               let invoiceClosed = null;
               window.__telegram = calls;
               window.__closeInvoice = (status) => invoiceClosed(status);
               window.Telegram = {{WebApp: {{
                 initData: {init}, initDataUnsafe: {unsafe_data}, themeParams: {theme},
                 colorScheme: {scheme}, version: '9.0', platform: 'tdesktop',
                 isVersionAtLeast: () => true,
                 ready() {{ calls.ready += 1; }},
                 expand() {{ calls.expand += 1; }},
                 close() {{ calls.closed = true; }},
                 onEvent() {{}}, offEvent() {{}},
                 BackButton: {{show() {{}}, hide() {{}}, onClick() {{}}, offClick() {{}}}},
                 HapticFeedback: {{notificationOccurred() {{}}}},
                 openInvoice(url, closed) {{ calls.invoices.push(url); invoiceClosed = closed; }},
                 openLink(url) {{ calls.links.push(url); }},
                 openTelegramLink(url) {{ calls.links.push(url); }},
                 showConfirm(message, answer) {{ calls.confirms.push(message); answer(true); }},
               }}}};
             }})();",
            init = json!(self.init_data),
            theme = self.theme,
            scheme = json!(self.scheme),
        )
    }
}

/// A browser at a phone's width that can open the page as Telegram would.
struct MiniApp {
    browser: Browser,
    base: String,
    stand_in: Option<String>,
}

impl MiniApp {
    async fn start(app: &TestApp) -> MiniApp {
        let base = serve(app).await;
        let browser = Browser::start().await;
        browser.block(&[TELEGRAM_JS]).await;
        browser.set_window(PHONE.0, PHONE.1).await;
        MiniApp {
            browser,
            base,
            stand_in: None,
        }
    }

    /// Opens `/app/{query}` launched as `launch` says (`None`: no `window.Telegram` at all).
    async fn open(&mut self, query: &str, launch: Option<&Launch>) {
        if let Some(old) = self.stand_in.take() {
            self.browser.forget_script(&old).await;
        }
        if let Some(launch) = launch {
            self.stand_in = Some(self.browser.before_every_page(&launch.script()).await);
        }
        self.browser
            .goto(&format!("{}/app/{query}", self.base))
            .await;
    }

    /// Fails when the page is wider than the phone.
    async fn fits_the_phone(&self, screen: &str) {
        let inner = self
            .browser
            .execute("return window.innerWidth;", json!([]))
            .await;
        assert!(
            inner.as_i64().is_some_and(|w| w <= i64::from(PHONE.0)),
            "{screen}: the window is {inner} px wide, not a phone's"
        );
        assert_eq!(
            self.browser.wider_than_screen().await,
            None,
            "{screen}: the page scrolls sideways at {} px",
            PHONE.0
        );
    }

    /// What the stand-in recorded: `invoices`, `links` or `confirms`.
    async fn asked(&self, what: &str) -> Vec<String> {
        let v = self
            .browser
            .execute(
                "return window.__telegram ? window.__telegram[arguments[0]] : [];",
                json!([what]),
            )
            .await;
        serde_json::from_value(v).unwrap_or_default()
    }

    /// Waits until the page asked Telegram for `what` (`invoices`, `links`); returns the first.
    async fn wait_asked(&self, what: &str) -> String {
        let deadline = tokio::time::Instant::now() + crate::support::browser::WAIT;
        loop {
            if let Some(first) = self.asked(what).await.into_iter().next() {
                return first;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the page never called Telegram for {what}; it shows:\n{}",
                self.browser.page_text().await
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// The computed background colour of the page's body.
    async fn background(&self) -> String {
        self.browser
            .execute(
                "return getComputedStyle(document.body).backgroundColor;",
                json!([]),
            )
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    async fn quit(self) {
        self.browser.quit().await;
    }
}

/// An app with the fake Bot API (its token signs the launch data), a public URL and WayForPay.
async fn app_with(fake: &FakeBot) -> TestApp {
    let url = fake.url.clone();
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
        env.insert("TELEGRAM_BOT_USERNAME".into(), "subgate_test_bot".into());
        env.insert("PUBLIC_URL".into(), "https://pay.example.com".into());
    })
    .await
}

fn id_of(v: &Value) -> i64 {
    v["id"].as_i64().expect("an id")
}

/// The reference of the newest order of the buyer with Telegram id `user`.
async fn last_order_reference(app: &TestApp, user: i64) -> String {
    app.db()
        .await
        .query_one(
            "SELECT o.reference FROM orders o JOIN subscribers s ON s.id = o.subscriber_id
             WHERE s.telegram_user_id = $1 ORDER BY o.id DESC LIMIT 1",
            &[&user],
        )
        .await
        .unwrap()
        .get("reference")
}

/// Pays the buyer's newest order with Stars through the Telegram door, then closes the invoice
/// as paid, as Telegram does once its payment went through.
async fn pay_with_stars(app: &TestApp, page: &MiniApp, user: i64, amount: i64, charge: &str) {
    let reference = last_order_reference(app, user).await;
    app.post_telegram_update(payment_update(charge, user, &reference, amount, None))
        .await
        .expect(200);
    page.browser
        .execute("window.__closeInvoice('paid');", json!([]))
        .await;
}

// ---- the page alone ----

#[tokio::test]
async fn the_page_is_served_from_the_binary_with_a_policy_that_lets_only_telegram_in() {
    let app = TestApp::spawn().await;
    let r = app.request(Method::GET, "/app", &[], Body::empty()).await;
    assert_eq!(r.status.as_u16(), 308);
    assert_eq!(r.header("location"), Some("/app/"));

    let cases = [
        ("/app/", "text/html; charset=utf-8", "<main id=\"main\""),
        (
            "/app/app.js",
            "text/javascript; charset=utf-8",
            "'tma ' + tg.initData",
        ),
        (
            "/app/app.css",
            "text/css; charset=utf-8",
            "--tg-theme-bg-color",
        ),
    ];
    for (path, content_type, needle) in cases {
        // No authentication: the files carry no data.
        let r = app.request(Method::GET, path, &[], Body::empty()).await;
        assert_eq!(r.status.as_u16(), 200, "{path}");
        assert_eq!(r.header("content-type"), Some(content_type), "{path}");
        let text = String::from_utf8(r.bytes.clone()).unwrap();
        assert!(text.contains(needle), "{path} lacks {needle}");
        assert_eq!(
            r.header("content-security-policy"),
            Some(
                "default-src 'none'; script-src 'self' https://telegram.org; style-src 'self'; \
                 img-src 'self' data:; connect-src 'self'; \
                 frame-ancestors https://web.telegram.org https://*.telegram.org; \
                 base-uri 'none'; form-action 'none'"
            ),
            "{path}"
        );
        assert_eq!(r.header("content-security-policy"), Some(CSP));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        // Telegram Web shows the page in its iframe: only the policy's frame-ancestors decide.
        assert_eq!(r.header("x-frame-options"), None, "{path}");
        assert_eq!(r.header("cache-control"), Some("no-cache"));
        let etag = r.header("etag").expect("an etag").to_string();
        let again = app
            .request(
                Method::GET,
                path,
                &[("if-none-match", &etag)],
                Body::empty(),
            )
            .await;
        assert_eq!(again.status.as_u16(), 304, "{path}");
        assert!(again.bytes.is_empty());
    }

    // The page loads its own two files and Telegram's script, nothing inline.
    let html = String::from_utf8(
        app.request(Method::GET, "/app/", &[], Body::empty())
            .await
            .bytes,
    )
    .unwrap();
    assert!(!html.contains("<script>") && !html.contains(" style=") && !html.contains("<style"));
    let sources: Vec<&str> = html
        .split(['"'])
        .filter(|s| s.ends_with(".js") || s.ends_with(".css"))
        .collect();
    assert_eq!(sources, ["app.css", TELEGRAM_JS, "app.js"]);

    let missing = app
        .request(Method::GET, "/app/nothing.js", &[], Body::empty())
        .await;
    assert_eq!(missing.status.as_u16(), 404);
    assert_eq!(
        missing.header("content-type"),
        Some("application/problem+json")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opened_outside_telegram_the_page_asks_to_be_opened_from_telegram_in_its_theme() {
    let app = TestApp::spawn().await;
    let mut page = MiniApp::start(&app).await;

    // A browser with no Telegram at all (telegram.org unreachable).
    page.open("?c=1", None).await;
    page.browser
        .wait_text("#open-in-telegram", "Open this from Telegram")
        .await;
    page.fits_the_phone("no Telegram").await;

    // Telegram's script there but no launch data (a link opened in a browser): in the
    // Telegram user's language, in Telegram's dark theme, without asking the API anything.
    let outside = Launch {
        init_data: String::new(),
        language: "uk",
        theme: json!({}),
        scheme: "light",
    }
    .dark();
    page.open("", Some(&outside)).await;
    page.browser
        .wait_text("#open-in-telegram", "Відкрийте це з Telegram")
        .await;
    assert_eq!(page.background().await, "rgb(23, 33, 43)");
    let lang = page
        .browser
        .execute("return document.documentElement.lang;", json!([]))
        .await;
    assert_eq!(lang, "uk");
    let told = page
        .browser
        .execute(
            "return [window.__telegram.ready, window.__telegram.expand];",
            json!([]),
        )
        .await;
    assert_eq!(told, json!([1, 1]), "Telegram.WebApp.ready() and expand()");
    page.fits_the_phone("outside Telegram, dark").await;

    // Telegram's light defaults when the theme says nothing.
    let light = Launch {
        init_data: String::new(),
        language: "en",
        theme: json!({}),
        scheme: "light",
    };
    page.open("", Some(&light)).await;
    page.browser
        .wait_text("#open-in-telegram", "Open this from Telegram")
        .await;
    assert_eq!(page.background().await, "rgb(255, 255, 255)");
    page.quit().await;
}

// ---- with the Mini App API ----

/// A Stars channel (250 stars for 30 days) with a translated title and a free trial of 7 days;
/// returns (channel id, trial plan id).
async fn stars_channel_with_trial(app: &TestApp, chat: i64) -> (i64, i64) {
    let channel = id_of(
        &app.create_channel(
            chat,
            json!({"title": "Market notes", "description": "Daily notes on the market.",
                   "currency": "XTR", "price_minor": 250,
                   "translations": {"uk": {"title": "Ринкові нотатки",
                                           "description": "Щоденні нотатки про ринок."}}}),
        )
        .await,
    );
    let trial = app
        .insert_plan(
            NewPlan {
                title: "Taster",
                kind: "trial",
                price_minor: 0,
                currency: "XTR",
                period_days: Some(7),
                position: 1,
            },
            &[channel],
        )
        .await;
    (channel, trial)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_paywall_shows_the_plans_in_the_buyers_language_and_sells_with_stars() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (channel, _) = stars_channel_with_trial(&app, -100_700_001).await;
    let mut page = MiniApp::start(&app).await;

    // Ukrainian, in the dark theme: the channel's translated words and the page's own.
    let uk = Launch::signed(7_700_002, "uk").dark();
    page.open(&format!("?c={channel}"), Some(&uk)).await;
    page.browser
        .wait_text("#channel-title", "Ринкові нотатки")
        .await;
    let text = page.browser.wait_text("#plans", "250 ⭐").await;
    for words in ["на 30 днів", "Спробувати безкоштовно", "Купити"]
    {
        assert!(text.contains(words), "{words:?} missing from:\n{text}");
    }
    // Headings are shown in capitals (the page's style), as a person reads them.
    assert!(page.browser.page_text().await.contains("ОБЕРІТЬ ТАРИФ"));
    assert_eq!(page.background().await, "rgb(23, 33, 43)");
    page.fits_the_phone("the paywall in Ukrainian").await;

    // English: bought with Stars, paid through the Telegram door, then in.
    let user = 7_700_001;
    let en = Launch::signed(user, "en");
    page.open(&format!("?c={channel}"), Some(&en)).await;
    page.browser
        .wait_text("#channel-title", "Market notes")
        .await;
    let text = page.browser.wait_text("#plans", "250 ⭐").await;
    for words in ["for 30 days", "Try free", "Buy", "Free trial"] {
        assert!(text.contains(words), "{words:?} missing from:\n{text}");
    }
    assert!(
        page.browser
            .page_text()
            .await
            .contains("Daily notes on the market.")
    );
    page.fits_the_phone("the paywall in English").await;

    let paid_plan = super::default_plan(&app, channel).await;
    page.browser
        .click(&format!("button.buy[data-plan=\"{paid_plan}\"]"))
        .await;
    let invoice = page.wait_asked("invoices").await;
    assert!(
        invoice.starts_with("https://t.me/$fake_invoice_"),
        "openInvoice was given {invoice}"
    );
    page.browser
        .wait_text("#waiting", "Waiting for your payment")
        .await;
    pay_with_stars(&app, &page, user, 250, "stars-charge-7701").await;
    let done = page.browser.wait_text("#done", "You’re in!").await;
    assert!(
        done.contains("The bot has sent you the link in the chat."),
        "{done}"
    );
    page.fits_the_phone("you're in").await;
    page.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trial_lets_the_buyer_in_at_once() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (channel, trial) = stars_channel_with_trial(&app, -100_700_011).await;
    let mut page = MiniApp::start(&app).await;
    page.open(
        &format!("?c={channel}"),
        Some(&Launch::signed(7_700_011, "en")),
    )
    .await;
    page.browser
        .click(&format!("button.buy[data-plan=\"{trial}\"]"))
        .await;
    page.browser.wait_text("#done", "You’re in!").await;
    assert!(
        page.asked("invoices").await.is_empty(),
        "a trial asks for no payment"
    );
    let live: i64 = app
        .db()
        .await
        .query_one(
            "SELECT count(*) AS live FROM memberships m JOIN subscribers s ON s.id = m.subscriber_id
             WHERE s.telegram_user_id = 7700011 AND m.channel_id = $1 AND m.status = 'active'",
            &[&(channel as i32)],
        )
        .await
        .unwrap()
        .get("live");
    assert_eq!(live, 1);
    page.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_plan_opens_the_wayforpay_page_and_a_promo_code_shows_its_price() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    // 199.00 UAH for 30 days, paid by card.
    let channel = id_of(
        &app.create_channel(-100_700_021, json!({"title": "Card club"}))
            .await,
    );
    app.post(
        "/api/promo-codes",
        json!({"code": "SAVE20", "percent_off": 20}),
    )
    .await
    .expect(201);
    let mut page = MiniApp::start(&app).await;
    page.open(
        &format!("?c={channel}"),
        Some(&Launch::signed(7_700_021, "en")),
    )
    .await;
    page.browser.wait_text("#plans", "199").await;

    // A code that does not exist is refused with the API's reason; a good one shows the price
    // after it, the old one struck through.
    page.browser.fill("#promo-code", "NOSUCH").await;
    page.browser.click("#promo-apply").await;
    let refused = page.browser.wait_text("#promo-result", "").await;
    assert!(!refused.trim().is_empty(), "a refusal says why");
    page.browser.fill("#promo-code", "save20").await;
    page.browser.click("#promo-apply").await;
    page.browser
        .wait_text("#promo-result", "Code SAVE20 applied")
        .await;
    let plans = page.browser.wait_text("#plans", "159").await;
    assert!(plans.contains("199"), "the price before the code: {plans}");
    let struck = page
        .browser
        .execute(
            "return Array.from(document.querySelectorAll('#plans s')).map((s) => s.textContent);",
            json!([]),
        )
        .await;
    assert!(struck.to_string().contains("199"), "{struck}");
    page.fits_the_phone("a promo code applied").await;

    page.browser.click("button.buy").await;
    let link = page.wait_asked("links").await;
    assert!(
        link.starts_with("https://secure.wayforpay.com/pay?"),
        "openLink was given {link}"
    );
    let reference = last_order_reference(&app, 7_700_021).await;
    assert!(link.contains(&reference), "{link} names {reference}");
    page.browser
        .wait_text("#waiting", "Finish the payment on the card page")
        .await;
    page.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_portal_lists_a_membership_with_its_end_and_cancels_a_stars_subscription() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let channel = id_of(
        &app.create_channel(
            -100_700_031,
            json!({"title": "Weekly letters", "currency": "XTR", "price_minor": 250,
                   "recurring": true}),
        )
        .await,
    );
    let user = 7_700_031;
    let mut page = MiniApp::start(&app).await;
    let launch = Launch::signed(user, "en");
    page.open(&format!("?c={channel}"), Some(&launch)).await;
    page.browser.click("button.buy").await;
    page.wait_asked("invoices").await;
    // The first charge of a Stars subscription, renewing in 30 days.
    let reference = last_order_reference(&app, user).await;
    let renews = chrono::Utc::now() + chrono::Duration::days(30);
    let charge = payment_update(
        "sub-charge-7731",
        user,
        &reference,
        250,
        Some((true, renews)),
    );
    app.post_telegram_update(charge).await.expect(200);
    page.browser
        .execute("window.__closeInvoice('paid');", json!([]))
        .await;
    page.browser.wait_text("#done", "You’re in!").await;

    // To the portal: the membership and when it ends, in the buyer's words for dates.
    page.browser.click("#done button.plain").await;
    let expires: chrono::DateTime<chrono::Utc> = app
        .db()
        .await
        .query_one(
            "SELECT expires_at FROM memberships WHERE channel_id = $1",
            &[&(channel as i32)],
        )
        .await
        .unwrap()
        .get("expires_at");
    let day = page
        .browser
        .execute(
            "return new Intl.DateTimeFormat('en', {dateStyle: 'long'}).format(new Date(arguments[0]));",
            json!([expires.to_rfc3339()]),
        )
        .await;
    let day = day.as_str().unwrap().to_string();
    let memberships = page
        .browser
        .wait_text("#memberships", "Weekly letters")
        .await;
    assert!(
        memberships.contains(&format!("until {day}")),
        "{memberships}"
    );
    let payments = page.browser.wait_text("#payments", "Telegram Stars").await;
    assert!(payments.contains("Weekly letters"), "{payments}");
    page.fits_the_phone("the portal").await;
    keep(&page.browser, "30-mini-app-portal-phone.png", PHONE.0).await;
    keep(&page.browser, "31-mini-app-portal-desktop.png", 1024).await;
    page.browser.set_window(PHONE.0, PHONE.1).await;

    // Cancel the subscription: Telegram is asked, the button offers to resume.
    let subscriptions = page.browser.wait_text("#subscriptions", "Renews on").await;
    assert!(subscriptions.contains("Weekly letters"), "{subscriptions}");
    page.browser.click("button.cancel").await;
    page.browser
        .wait_text("#subscriptions", "Resume subscription")
        .await;
    assert_eq!(page.asked("confirms").await.len(), 1, "asked to confirm");
    // Telegram is told, at once or by the worker.
    run(&app).await;
    assert!(fake.subscription_cancelled(user, "sub-charge-7731"));

    // The language switcher: the portal in Ukrainian, remembered for the buyer.
    page.browser.select("#language", "Українська").await;
    page.browser.wait_text("main", "Мої підписки").await;
    let language: String = app
        .db()
        .await
        .query_one(
            "SELECT language FROM subscribers WHERE telegram_user_id = $1",
            &[&user],
        )
        .await
        .unwrap()
        .get("language");
    assert_eq!(language, "uk");
    page.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_data_not_signed_with_the_bots_token_shows_the_open_from_telegram_screen() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (channel, _) = stars_channel_with_trial(&app, -100_700_041).await;
    let mut page = MiniApp::start(&app).await;
    let forged = Launch {
        init_data: init_data(
            "654321:another-bot's-token",
            7_700_041,
            "en",
            chrono::Utc::now().timestamp(),
        ),
        language: "en",
        theme: json!({}),
        scheme: "light",
    };
    page.open(&format!("?c={channel}"), Some(&forged)).await;
    page.browser
        .wait_text("#open-in-telegram", "Open this from Telegram")
        .await;
    assert!(!page.browser.page_text().await.contains("Market notes"));
    page.open("", Some(&forged)).await;
    page.browser
        .wait_text("#open-in-telegram", "Open this from Telegram")
        .await;
    page.quit().await;
}

// ---- at the door ----

/// The whole way in: a stranger taps the chat's link, the door opens the paywall for their
/// request, they buy with Stars on the page, and the payment lets them in through their
/// request's query, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_at_the_door_pays_on_the_page_and_is_let_in_through_the_query() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -100_700_031;
    let (channel, _) = stars_channel_with_trial(&app, chat).await;
    app.patch(
        &format!("/api/channels/{channel}"),
        json!({"door": "mini_app"}),
    )
    .await
    .expect(200);
    let user = 7_700_031;
    fake.open_join_query(chat, user, "door-e2e");
    let reply = app
        .post_telegram_update(crate::door::queries::query_update(
            chat,
            "supergroup",
            user,
            "door-e2e",
        ))
        .await
        .expect(200);
    assert!(fake.perform_reply(&reply));
    assert_eq!(reply["method"], "sendChatJoinRequestWebApp", "{reply}");
    let url = reply["web_app_url"].as_str().unwrap();
    let query = url
        .strip_prefix("https://pay.example.com/app/")
        .expect("the paywall's URL");
    assert!(query.starts_with(&format!("?c={channel}&r=jr_")), "{url}");

    let mut page = MiniApp::start(&app).await;
    page.open(query, Some(&Launch::signed(user, "uk"))).await;
    page.browser
        .wait_text("#channel-title", "Ринкові нотатки")
        .await;
    // With `CONSOLE_SCREENSHOTS_DIR` set, the paywall as a person sees it, at both widths.
    keep(&page.browser, "32-mini-app-paywall-phone.png", PHONE.0).await;
    keep(&page.browser, "33-mini-app-paywall-desktop.png", 1024).await;
    page.browser.set_window(PHONE.0, PHONE.1).await;
    let paid_plan = super::default_plan(&app, channel).await;
    page.browser
        .click(&format!("button.buy[data-plan=\"{paid_plan}\"]"))
        .await;
    page.wait_asked("invoices").await;
    // The page's order is tied to the request waiting at the door.
    let linked: i64 = app
        .db()
        .await
        .query_one(
            "SELECT count(*) FROM join_requests j JOIN orders o ON o.id = j.order_id
             WHERE j.query_id = 'door-e2e' AND j.state = 'waiting'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(linked, 1, "the order is tied to the waiting request");
    pay_with_stars(&app, &page, user, 250, "stars-charge-door-e2e").await;
    let done = page.browser.wait_text("#done", "Ви з нами!").await;
    // Let in through the request: no link is promised.
    assert!(
        done.contains("Доступ до «Ринкові нотатки» готовий.") && !done.contains("посилання"),
        "{done}"
    );
    crate::support::effects::run_until_done(&app).await;
    // The page follows the request until it is let in, and says so.
    page.browser
        .wait_text("#join-request", "Ваш запит на вступ схвалено")
        .await;
    keep(&page.browser, "34-mini-app-in-phone.png", PHONE.0).await;

    assert!(fake.is_member(chat, user), "the buyer is in the group");
    assert_eq!(
        fake.query_answers("door-e2e"),
        vec![format!("web_app {url}"), "approve".to_string()],
        "the query: the paywall, then one approval"
    );
    assert!(fake.links_of(chat).is_empty(), "no join link was needed");
    let state: String = app
        .db()
        .await
        .query_one(
            "SELECT state FROM join_requests WHERE query_id = 'door-e2e'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "approved");
    page.quit().await;
}
