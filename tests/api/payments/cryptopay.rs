//! Door 6 (Crypto Pay) and the bot's crypto invoices: updates signed here as Crypto Pay signs
//! them (hex HMAC-SHA256 of the body keyed with SHA-256 of the app token, computed by the fake
//! rather than by the service's code), invoices made and read against [`FakeCryptoPay`], the
//! reconcile that asks `getInvoices` about invoices whose webhook has not come, and the plans
//! API's `crypto_prices`.

use std::time::Duration;

use serde_json::{Value, json};
use subgate::{
    orders::crypto_invoices::{self, NewInvoice},
    payments::gateways::cryptopay::reconcile::{self, Report},
};

use crate::{
    bot::conversation::{
        ALREADY_SENT, BOT, ON_ITS_WAY, PUBLIC_URL, assert_answer, button_update, buttons, channel,
        person, run, send,
    },
    support::{
        effects::make_due,
        fake_bot::{FakeBot, Reply, TOKEN as BOT_TOKEN},
        fake_cryptopay::{FakeCryptoPay, OTHER_TOKEN, TOKEN, signature},
        helpers::{TestApp, TestResponse, id, reference},
        race::race,
    },
};

/// An app with Crypto Pay configured against `fake` (WayForPay stays configured, as in every
/// test).
async fn cryptopay_app(fake: &FakeCryptoPay) -> TestApp {
    let url = fake.url.clone();
    TestApp::spawn_with(move |env| {
        env.insert("CRYPTOPAY_TOKEN".into(), TOKEN.into());
        env.insert("CRYPTOPAY_API_URL".into(), url);
    })
    .await
}

async fn post_raw(app: &TestApp, body: &str, signature: Option<String>) -> TestResponse {
    let mut headers = vec![("content-type", "application/json".to_string())];
    if let Some(s) = signature {
        headers.push(("crypto-pay-api-signature", s));
    }
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    app.request(
        axum::http::Method::POST,
        "/api/webhook/cryptopay",
        &headers,
        body.to_string(),
    )
    .await
}

/// Posts `body`, signed as Crypto Pay signs it for our app.
async fn post_update(app: &TestApp, body: &str) -> TestResponse {
    post_raw(app, body, Some(signature(TOKEN, body))).await
}

/// The default plan of channel `c`.
async fn default_plan(app: &TestApp, c: i64) -> i64 {
    app.db()
        .await
        .query_one("SELECT id FROM plans WHERE default_of = $1", &[&(c as i32)])
        .await
        .unwrap()
        .get(0)
}

/// Prices channel `c`'s default plan at 4.99 USDT and 1.5 TON.
async fn price_in_crypto(app: &TestApp, c: i64) {
    let plan = default_plan(app, c).await;
    app.patch(
        &format!("/api/plans/{plan}"),
        json!({"crypto_prices": {"USDT": "4.99", "TON": "1.5"}}),
    )
    .await
    .expect(200);
}

/// Keeps invoice `invoice` (as the fake made it) for order `order_id` in `asset` at
/// `amount_minor`, due to be asked about at once.
async fn keep(app: &TestApp, invoice: &Value, order_id: i64, asset: &str, amount_minor: i64) {
    let client = app.db().await;
    crypto_invoices::keep(
        &client,
        &NewInvoice {
            invoice_id: invoice["invoice_id"].as_i64().unwrap(),
            order_id,
            asset,
            amount_minor,
            pay_url: invoice["bot_invoice_url"].as_str().unwrap(),
            expires_at: chrono::Utc::now() + chrono::Duration::seconds(300),
        },
        Duration::ZERO,
    )
    .await
    .unwrap();
}

/// A subscriber, a 199.00 UAH channel priced 4.99 USDT / 1.5 TON, an order, and its USDT
/// invoice at the fake (kept as the bot keeps it); returns (channel, order, invoice id).
async fn crypto_order(
    app: &TestApp,
    fake: &FakeCryptoPay,
    user: i64,
    chat: i64,
    extra: Value,
) -> (i64, Value, i64) {
    let s = app.create_subscriber(user).await;
    let c = app.create_channel(chat, extra).await;
    price_in_crypto(app, id(&c)).await;
    let o = app.create_order(id(&s), id(&c)).await;
    let invoice = fake.make("USDT", "4.99", &reference(&o), 300);
    keep(app, &invoice, id(&o), "USDT", 4_990_000).await;
    (id(&c), o, invoice["invoice_id"].as_i64().unwrap())
}

async fn pass(app: &TestApp) -> Report {
    reconcile::run_once(&app.state.db, app.state.config.cryptopay.as_ref().unwrap())
        .await
        .unwrap()
}

async fn invoice_status(app: &TestApp, invoice_id: i64) -> String {
    app.db()
        .await
        .query_one(
            "SELECT status FROM cryptopay_invoices WHERE invoice_id = $1",
            &[&invoice_id],
        )
        .await
        .unwrap()
        .get(0)
}

async fn memberships_of(app: &TestApp, c: i64) -> Vec<(String, chrono::DateTime<chrono::Utc>)> {
    app.db()
        .await
        .query(
            "SELECT status, expires_at FROM memberships WHERE channel_id = $1",
            &[&(c as i32)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test]
async fn without_crypto_pay_configured_the_door_is_closed() {
    let app = TestApp::spawn().await;
    let body = json!({"update_id": 1, "update_type": "invoice_paid"}).to_string();
    let r = post_update(&app, &body).await;
    assert_eq!(r.status.as_u16(), 503);
    assert_eq!(app.count("payments").await, 0);
}

#[tokio::test]
async fn a_signed_invoice_paid_applies_in_the_asset_paid() {
    let fake = FakeCryptoPay::start().await;
    let app = cryptopay_app(&fake).await;
    let (c, o, invoice) = crypto_order(&app, &fake, 8601, -100_860_001, json!({})).await;
    fake.pay(invoice);
    let r = post_update(&app, &fake.paid_update(invoice))
        .await
        .expect(200);
    assert_eq!(r["duplicate"], false, "{r}");
    let p = &r["payment"];
    assert_eq!(p["gateway"], "cryptopay");
    assert_eq!(p["external_id"], invoice.to_string());
    assert_eq!(p["order_reference"], reference(&o));
    assert_eq!(p["currency"], "USDT");
    assert_eq!(p["amount_minor"], 4_990_000);
    assert_eq!(p["outcome"], "applied", "{r}");
    assert_eq!(r["membership"]["status"], "active");
    assert_eq!(memberships_of(&app, c).await.len(), 1);
    assert_eq!(invoice_status(&app, invoice).await, "paid");
    let order = app
        .get(&format!("/api/orders/{}", id(&o)))
        .await
        .expect(200);
    assert_eq!(order["status"], "paid");
    // Revenue shows the asset as its own currency.
    let payments = app.get("/api/payments").await.expect(200);
    assert_eq!(payments["items"][0]["currency"], "USDT");
}

#[tokio::test]
async fn missing_wrong_and_other_apps_signatures_are_refused_and_store_nothing() {
    let fake = FakeCryptoPay::start().await;
    let app = cryptopay_app(&fake).await;
    let (c, _, invoice) = crypto_order(&app, &fake, 8602, -100_860_002, json!({})).await;
    fake.pay(invoice);
    let body = fake.paid_update(invoice);
    // No signature.
    let r = post_raw(&app, &body, None).await;
    assert_eq!(r.status.as_u16(), 401);
    assert_eq!(r.json()["status"], 401);
    // Signed by another app (another token).
    let r = post_raw(&app, &body, Some(signature(OTHER_TOKEN, &body))).await;
    assert_eq!(r.status.as_u16(), 401);
    // The right signature of another body.
    let other = body.replace("4.99", "0.01");
    let r = post_raw(&app, &body, Some(signature(TOKEN, &other))).await;
    assert_eq!(r.status.as_u16(), 401);
    // Keyed with the token itself rather than its SHA-256.
    let raw = {
        use hmac::{Hmac, Mac};
        let mut m = Hmac::<sha2::Sha256>::new_from_slice(TOKEN.as_bytes()).unwrap();
        m.update(body.as_bytes());
        hex::encode(m.finalize().into_bytes())
    };
    let r = post_raw(&app, &body, Some(raw)).await;
    assert_eq!(r.status.as_u16(), 401);
    // Not hex at all.
    let r = post_raw(&app, &body, Some("not-a-signature".into())).await;
    assert_eq!(r.status.as_u16(), 401);
    assert_eq!(app.count("payments").await, 0);
    assert!(memberships_of(&app, c).await.is_empty());
    // The valid one then applies.
    post_update(&app, &body).await.expect(200);
    assert_eq!(app.count("payments").await, 1);
}

#[tokio::test]
async fn a_replayed_delivery_and_a_second_update_of_one_invoice_are_duplicates() {
    let fake = FakeCryptoPay::start().await;
    let app = cryptopay_app(&fake).await;
    let (c, _, invoice) = crypto_order(&app, &fake, 8603, -100_860_003, json!({})).await;
    fake.pay(invoice);
    let body = fake.paid_update(invoice);
    let first = post_update(&app, &body).await.expect(200);
    // The same bytes again (a replay: Crypto Pay's signature carries no time).
    let again = post_update(&app, &body).await.expect(200);
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["payment"]["id"], first["payment"]["id"]);
    assert_eq!(
        again["membership"]["expires_at"],
        first["membership"]["expires_at"]
    );
    // Another update (new update_id and request_date) of the same invoice: deduped on
    // (cryptopay, invoice_id).
    let other = fake.paid_update(invoice);
    assert_ne!(other, body);
    let third = post_update(&app, &other).await.expect(200);
    assert_eq!(third["duplicate"], true);
    assert_eq!(app.count("payments").await, 1);
    assert_eq!(
        memberships_of(&app, c).await[0].1.to_rfc3339(),
        chrono::DateTime::parse_from_rfc3339(first["membership"]["expires_at"].as_str().unwrap())
            .unwrap()
            .to_rfc3339()
    );
    let events: i64 = app
        .db()
        .await
        .query_one("SELECT count(*) FROM membership_events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(events, 1, "one extension");
}

#[tokio::test]
async fn a_wrong_amount_or_asset_is_kept_for_review() {
    let fake = FakeCryptoPay::start().await;
    let app = cryptopay_app(&fake).await;
    // Less than the invoice asked.
    let (c, o, invoice) = crypto_order(&app, &fake, 8604, -100_860_004, json!({})).await;
    fake.pay_with(invoice, "USDT", "4.98");
    let r = post_update(&app, &fake.paid_update(invoice))
        .await
        .expect(200);
    assert_eq!(r["payment"]["outcome"], "needs_review", "{r}");
    assert_eq!(r["payment"]["reason"], "amount_mismatch");
    assert_eq!(r["payment"]["amount_minor"], 4_980_000);
    assert!(memberships_of(&app, c).await.is_empty());
    let order = app
        .get(&format!("/api/orders/{}", id(&o)))
        .await
        .expect(200);
    assert_eq!(order["status"], "pending");

    // An asset the plan has no price in.
    let (c, _, invoice) = crypto_order(&app, &fake, 8605, -100_860_005, json!({})).await;
    fake.pay_with(invoice, "BTC", "0.0001");
    let r = post_update(&app, &fake.paid_update(invoice))
        .await
        .expect(200);
    assert_eq!(r["payment"]["outcome"], "needs_review", "{r}");
    assert_eq!(r["payment"]["reason"], "currency_mismatch");
    assert_eq!(r["payment"]["currency"], "BTC");
    assert!(memberships_of(&app, c).await.is_empty());

    // An asset the plan is priced in, but not the one this invoice asked: checked against the
    // order's price in that asset (1.5 TON), so 1.5 TON pays it.
    let (c, _, invoice) = crypto_order(&app, &fake, 8606, -100_860_006, json!({})).await;
    fake.pay_with(invoice, "TON", "1.5");
    let r = post_update(&app, &fake.paid_update(invoice))
        .await
        .expect(200);
    assert_eq!(r["payment"]["outcome"], "applied", "{r}");
    assert_eq!(memberships_of(&app, c).await.len(), 1);
    assert_eq!(app.count("payments").await, 3);
}

#[tokio::test]
async fn malformed_signed_updates_store_nothing_and_other_types_are_ignored() {
    let fake = FakeCryptoPay::start().await;
    let app = cryptopay_app(&fake).await;
    let (_, _, invoice) = crypto_order(&app, &fake, 8607, -100_860_007, json!({})).await;
    fake.pay(invoice);
    let good: Value = serde_json::from_str(&fake.paid_update(invoice)).unwrap();
    // Not JSON, or a field of the wrong type: 400.
    for body in [
        "not json".to_string(),
        json!({"update_id": 1}).to_string(),
        {
            let mut b = good.clone();
            b["payload"]["invoice_id"] = "abc".into();
            b.to_string()
        },
    ] {
        let r = post_update(&app, &body).await;
        assert_eq!(r.status.as_u16(), 400, "{body}");
    }
    // A paid invoice without what a payment needs: 422 naming the field.
    for (field, value) in [
        ("payload", Value::Null),
        ("paid_amount", json!("4.99999999")),
        ("status", json!("active")),
    ] {
        let mut b = good.clone();
        b["payload"][field] = value;
        let r = post_update(&app, &b.to_string()).await;
        assert_eq!(r.status.as_u16(), 422, "{field}");
        assert!(
            r.json()["errors"]
                .as_object()
                .unwrap()
                .keys()
                .any(|k| k.starts_with("payload.")),
            "{}",
            r.json()
        );
    }
    assert_eq!(app.count("payments").await, 0);
    // Another update type: acknowledged and ignored.
    let other = json!({"update_id": 3, "update_type": "invoice_expired",
        "request_date": "2026-12-08T01:00:00.000Z", "payload": good["payload"]})
    .to_string();
    let r = post_update(&app, &other).await.expect(200);
    assert_eq!(r, json!({"ignored": true}));
    assert_eq!(app.count("payments").await, 0);
}

#[tokio::test]
async fn a_lost_webhook_is_found_by_asking_and_its_late_delivery_is_a_duplicate() {
    let fake = FakeCryptoPay::start().await;
    let app = cryptopay_app(&fake).await;
    let (c, o, invoice) = crypto_order(&app, &fake, 8608, -100_860_008, json!({})).await;
    // Still active at Crypto Pay: asked, nothing found, asked again later.
    let report = pass(&app).await;
    assert_eq!((report.checked, report.found, report.again), (1, 0, 1));
    let asked = fake.received();
    let last = asked.last().unwrap();
    assert_eq!(last.method, "getInvoices");
    assert_eq!(last.params["invoice_ids"], invoice.to_string());
    assert_eq!(pass(&app).await.checked, 0, "not due again yet");

    // Paid; the webhook never came.
    fake.pay(invoice);
    app.db()
        .await
        .execute(
            "UPDATE cryptopay_invoices SET next_check_at = now() WHERE invoice_id = $1",
            &[&invoice],
        )
        .await
        .unwrap();
    let report = pass(&app).await;
    assert_eq!((report.checked, report.found), (1, 1), "{report:?}");
    assert_eq!(invoice_status(&app, invoice).await, "paid");
    let payments = app
        .get(&format!("/api/payments?order_id={}", id(&o)))
        .await
        .expect(200);
    let items = payments["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["gateway"], "cryptopay");
    assert_eq!(items[0]["external_id"], invoice.to_string());
    assert_eq!(items[0]["outcome"], "applied");
    assert_eq!(memberships_of(&app, c).await.len(), 1);
    // Not asked again, and the late webhook is a duplicate.
    assert_eq!(pass(&app).await.checked, 0);
    let late = post_update(&app, &fake.paid_update(invoice))
        .await
        .expect(200);
    assert_eq!(late["duplicate"], true);
    assert_eq!(app.count("payments").await, 1);
}

#[tokio::test]
async fn an_expired_invoice_gives_its_seat_back() {
    let fake = FakeCryptoPay::start().await;
    let app = cryptopay_app(&fake).await;
    let (c, o, invoice) =
        crypto_order(&app, &fake, 8609, -100_860_009, json!({"seat_limit": 1})).await;
    app.checkout(id(&o)).await.expect(200);
    // The one seat is held: another buyer is refused.
    let other = app.create_subscriber(8610).await;
    let o2 = app.create_order(id(&other), c).await;
    assert_eq!(app.checkout(id(&o2)).await.status.as_u16(), 409);

    fake.expire(invoice);
    let report = pass(&app).await;
    assert_eq!((report.checked, report.expired), (1, 1), "{report:?}");
    assert_eq!(invoice_status(&app, invoice).await, "expired");
    // The hold ended now (its time is kept: the hold rules count it).
    let ended: bool = app
        .db()
        .await
        .query_one(
            "SELECT hold_until <= now() FROM orders WHERE id = $1",
            &[&id(&o)],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ended);
    // The seat is free again.
    let r = app.checkout(id(&o2)).await.expect(200);
    assert!(r["order"]["hold_until"].is_string(), "{r}");
    assert_eq!(
        pass(&app).await.checked,
        0,
        "an expired invoice is not asked about"
    );
}

/// Crypto Pay delivering one update several times at once: one payment, one extension.
#[tokio::test]
async fn concurrent_deliveries_of_one_update_apply_once() {
    let fake = FakeCryptoPay::start().await;
    let app = std::sync::Arc::new(cryptopay_app(&fake).await);
    for round in 0..5 {
        let (c, _, invoice) =
            crypto_order(&app, &fake, 8700 + round, -100_870_000 - round, json!({})).await;
        fake.pay(invoice);
        let body = fake.paid_update(invoice);
        let mut fresh = 0;
        for answer in race(6, |_| {
            let (app, body) = (app.clone(), body.clone());
            async move { post_update(&app, &body).await.expect(200) }
        })
        .await
        {
            if answer["duplicate"] == false {
                fresh += 1;
            }
        }
        assert_eq!(fresh, 1, "round {round}");
        let rows: (i64, i64) = {
            let db = app.db().await;
            let row = db
                .query_one(
                    "SELECT (SELECT count(*) FROM payments WHERE gateway = 'cryptopay'
                                AND external_id = $1),
                            (SELECT count(*) FROM membership_events e
                                JOIN memberships m ON m.id = e.membership_id
                                WHERE m.channel_id = $2)",
                    &[&invoice.to_string(), &(c as i32)],
                )
                .await
                .unwrap();
            (row.get(0), row.get(1))
        };
        assert_eq!(rows, (1, 1), "round {round}: one payment, one extension");
        let days: f64 = app
            .db()
            .await
            .query_one(
                "SELECT extract(epoch FROM expires_at - created_at)::float8 / 86400
                 FROM memberships WHERE channel_id = $1",
                &[&(c as i32)],
            )
            .await
            .unwrap()
            .get(0);
        assert!((29.9..30.1).contains(&days), "one term of 30 days: {days}");
    }
    assert_eq!(app.count("payments").await, 5);
}

// ---- plans' crypto prices ----

#[tokio::test]
async fn plans_carry_the_owners_crypto_prices_validated() {
    let app = TestApp::spawn().await;
    let c = app.create_channel(-100_860_020, json!({})).await;
    let created = app
        .post(
            "/api/plans",
            json!({"title": "Crypto", "channel_ids": [id(&c)], "price_minor": 19900,
                   "period_days": 30, "crypto_prices": {"USDT": "4.99", "TON": "1.500"}}),
        )
        .await
        .expect(201);
    assert_eq!(
        created["crypto_prices"],
        json!({"TON": "1.5", "USDT": "4.99"})
    );
    let plan = id(&created);
    let got = app.get(&format!("/api/plans/{plan}")).await.expect(200);
    assert_eq!(got["crypto_prices"], created["crypto_prices"]);
    // Stored exactly, in the assets' minor units.
    let stored: Value = app
        .db()
        .await
        .query_one("SELECT crypto_prices FROM plans WHERE id = $1", &[&plan])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, json!({"TON": 1_500_000_000_i64, "USDT": 4_990_000}));
    // A plan without them shows null.
    let plain = app
        .post(
            "/api/plans",
            json!({"title": "Plain", "channel_ids": [id(&c)], "price_minor": 100,
                   "period_days": 30}),
        )
        .await
        .expect(201);
    assert_eq!(plain["crypto_prices"], Value::Null);

    // PATCH replaces them; an absent field keeps them; null (or {}) removes them.
    let r = app
        .patch(
            &format!("/api/plans/{plan}"),
            json!({"crypto_prices": {"USDT": "5"}}),
        )
        .await
        .expect(200);
    assert_eq!(r["crypto_prices"], json!({"USDT": "5"}));
    let r = app
        .patch(&format!("/api/plans/{plan}"), json!({"title": "Renamed"}))
        .await
        .expect(200);
    assert_eq!(r["crypto_prices"], json!({"USDT": "5"}));
    let r = app
        .patch(
            &format!("/api/plans/{plan}"),
            json!({"crypto_prices": null}),
        )
        .await
        .expect(200);
    assert_eq!(r["crypto_prices"], Value::Null);
    let r = app
        .patch(&format!("/api/plans/{plan}"), json!({"crypto_prices": {}}))
        .await
        .expect(200);
    assert_eq!(r["crypto_prices"], Value::Null);

    // Refused with 422 naming the field, nothing written.
    for (prices, field) in [
        (json!({"DOGE": "1"}), "crypto_prices.DOGE"),
        (json!({"UAH": "1"}), "crypto_prices.UAH"),
        (json!({"USDT": 4.99}), "crypto_prices.USDT"),
        (json!({"USDT": "4.9999999"}), "crypto_prices.USDT"),
        (json!({"TON": "0"}), "crypto_prices.TON"),
        (json!({"TON": "-1.5"}), "crypto_prices.TON"),
        (json!({"TON": "1e3"}), "crypto_prices.TON"),
        (json!(["USDT"]), "crypto_prices"),
        (json!("4.99"), "crypto_prices"),
    ] {
        let r = app
            .patch(
                &format!("/api/plans/{plan}"),
                json!({"crypto_prices": prices}),
            )
            .await;
        assert_eq!(r.status.as_u16(), 422, "{prices}");
        assert!(
            r.json()["errors"].get(field).is_some(),
            "{prices}: {}",
            r.json()
        );
    }
    let r = app.get(&format!("/api/plans/{plan}")).await.expect(200);
    assert_eq!(r["crypto_prices"], Value::Null);
    // A trial is free: no crypto prices.
    let r = app
        .post(
            "/api/plans",
            json!({"title": "Try", "channel_ids": [id(&c)], "kind": "trial",
                   "period_days": 7, "crypto_prices": {"USDT": "1"}}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 422);
    assert!(r.json()["errors"].get("crypto_prices").is_some());
    // A channel's default plan may carry them too.
    let default = default_plan(&app, id(&c)).await;
    let r = app
        .patch(
            &format!("/api/plans/{default}"),
            json!({"crypto_prices": {"TON": "2"}}),
        )
        .await
        .expect(200);
    assert_eq!(r["crypto_prices"], json!({"TON": "2"}));
    // A crypto asset is never a channel's or a plan's own currency.
    let r = app
        .post(
            "/api/channels",
            json!({"telegram_chat_id": -100_860_021, "title": "T", "price_minor": 1,
                   "currency": "TON", "billing_period_days": 30}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 422);
    assert!(r.json()["errors"].get("currency").is_some());
}

// ---- the bot ----

async fn bot_app(bot: &FakeBot, cryptopay: Option<&FakeCryptoPay>) -> TestApp {
    let bot_url = bot.url.clone();
    let cryptopay_url = cryptopay.map(|c| c.url.clone());
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), bot_url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), BOT_TOKEN.into());
        env.insert("TELEGRAM_BOT_USERNAME".into(), BOT.into());
        env.insert("PUBLIC_URL".into(), PUBLIC_URL.into());
        if let Some(url) = cryptopay_url {
            env.insert("CRYPTOPAY_TOKEN".into(), TOKEN.into());
            env.insert("CRYPTOPAY_API_URL".into(), url);
        }
    })
    .await
}

async fn bot_order(app: &TestApp, user: i64) -> (i64, String) {
    let row = app
        .db()
        .await
        .query_one(
            "SELECT o.id, o.reference FROM orders o JOIN subscribers s ON s.id = o.subscriber_id
             WHERE s.telegram_user_id = $1",
            &[&user],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn the_buyer_picks_usdt_pays_the_invoice_and_is_let_in() {
    let (bot, cryptopay) = (FakeBot::start().await, FakeCryptoPay::start().await);
    let app = bot_app(&bot, Some(&cryptopay)).await;
    let c = channel(&app, -100_860_030, json!({"title": "Crypto club"})).await;
    price_in_crypto(&app, c).await;
    let buyer = person(8630);
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ON_ITS_WAY,
    );
    run(&app).await;
    let (order, reference) = bot_order(&app, 8630).await;

    // The card page, and beside it one button per asset priced.
    let messages = bot.calls_of("sendMessage");
    assert_eq!(messages.len(), 1);
    let b = buttons(&messages[0].params);
    assert_eq!(b.len(), 3, "{b:?}");
    assert_eq!(b[0].0, "Pay 199.00 UAH by card");
    assert_eq!(
        b[1],
        ("Pay 1.5 TON (@CryptoBot)".into(), format!("c:{order}:TON"))
    );
    assert_eq!(
        b[2],
        (
            "Pay 4.99 USDT (@CryptoBot)".into(),
            format!("c:{order}:USDT")
        )
    );
    assert!(cryptopay.created().is_empty(), "no invoice before a choice");

    // USDT chosen: the invoice is made once, however often the button or the effect runs.
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("c:{order}:USDT"))).await,
        ON_ITS_WAY,
    );
    // The first try to send it fails after the invoice was made; the retry reuses it.
    bot.script("sendMessage", Reply::ServerError);
    run(&app).await;
    make_due(&app).await;
    run(&app).await;
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("c:{order}:USDT"))).await,
        ALREADY_SENT,
    );
    run(&app).await;
    let created = cryptopay.created();
    assert_eq!(created.len(), 1, "{created:?}");
    let asked = &created[0];
    assert_eq!(asked["asset"], "USDT");
    assert_eq!(asked["amount"], "4.99");
    assert_eq!(asked["payload"], reference);
    let expires_in = asked["expires_in"].as_i64().unwrap();
    assert!(
        (60..=300).contains(&expires_in),
        "within the hold: {expires_in}"
    );
    assert_eq!(asked["paid_btn_name"], "openBot");
    assert_eq!(asked["paid_btn_url"], format!("https://t.me/{BOT}"));
    let invoice_id: i64 = app
        .db()
        .await
        .query_one(
            "SELECT invoice_id FROM cryptopay_invoices WHERE order_id = $1 AND asset = 'USDT'",
            &[&order],
        )
        .await
        .unwrap()
        .get(0);
    let url = cryptopay.invoice(invoice_id)["bot_invoice_url"]
        .as_str()
        .unwrap()
        .to_string();
    let messages = bot.calls_of("sendMessage");
    assert_eq!(
        messages.len(),
        3,
        "the card page, the failed try, its retry"
    );
    for m in &messages[1..] {
        assert_eq!(
            buttons(&m.params),
            [("Pay 4.99 USDT".to_string(), url.clone())]
        );
        assert!(
            m.params["text"].as_str().unwrap().contains("@CryptoBot"),
            "{}",
            m.params
        );
    }

    // Paid at Crypto Pay; the signed update lets the buyer in.
    cryptopay.pay(invoice_id);
    let r = post_update(&app, &cryptopay.paid_update(invoice_id))
        .await
        .expect(200);
    assert_eq!(r["payment"]["outcome"], "applied", "{r}");
    assert_eq!(r["payment"]["currency"], "USDT");
    assert_eq!(r["membership"]["status"], "active");
    bot.clear_calls();
    run(&app).await;
    assert_eq!(
        bot.calls_of("createChatInviteLink").len(),
        1,
        "{:?}",
        bot.methods()
    );
    let granted = bot.calls_of("sendMessage");
    assert_eq!(granted.len(), 1);
    assert_eq!(granted[0].params["chat_id"], 8630);
    // The order is paid: its asset buttons offer nothing more.
    assert_eq!(
        send(&app, &button_update(&buyer, &format!("c:{order}:TON"))).await["text"],
        "Sorry, this crypto payment is no longer available. Press buy again for a new invoice."
    );
}

#[tokio::test]
async fn without_crypto_pay_the_bot_offers_no_crypto() {
    let bot = FakeBot::start().await;
    let app = bot_app(&bot, None).await;
    let c = channel(&app, -100_860_031, json!({"title": "Card only"})).await;
    price_in_crypto(&app, c).await;
    send(&app, &button_update(&person(8631), &format!("b:{c}"))).await;
    run(&app).await;
    let messages = bot.calls_of("sendMessage");
    assert_eq!(messages.len(), 1);
    assert_eq!(buttons(&messages[0].params).len(), 1, "the card page only");
    // A forged asset button is refused.
    let (order, _) = bot_order(&app, 8631).await;
    let r = send(
        &app,
        &button_update(&person(8631), &format!("c:{order}:USDT")),
    )
    .await;
    assert_eq!(r["show_alert"], true, "{r}");
    assert_eq!(app.count("cryptopay_invoices").await, 0);
}

#[tokio::test]
async fn another_buyers_order_cannot_be_invoiced() {
    let (bot, cryptopay) = (FakeBot::start().await, FakeCryptoPay::start().await);
    let app = bot_app(&bot, Some(&cryptopay)).await;
    let c = channel(&app, -100_860_032, json!({})).await;
    price_in_crypto(&app, c).await;
    send(&app, &button_update(&person(8632), &format!("b:{c}"))).await;
    let (order, _) = bot_order(&app, 8632).await;
    let r = send(
        &app,
        &button_update(&person(8633), &format!("c:{order}:USDT")),
    )
    .await;
    assert_eq!(r["show_alert"], true, "{r}");
    run(&app).await;
    assert!(cryptopay.created().is_empty());
}
