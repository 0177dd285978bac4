//! The offers part of the console's walk: a plan made from its channel's page with a field
//! error first, a lifetime bundle, a promo code with its uses, deactivated, and an order bought
//! with it on the buyer's page.

use serde_json::{Value, json};

use crate::{
    console::walk::{Shots, shot},
    support::{browser::Browser, helpers::TestApp},
};

/// Selling plans: a plan made from its channel's page (a bad field answered next to the field,
/// then fixed), a lifetime bundle, a promo code with its uses and its deactivation, an order
/// bought with the code on the buyer's page (list price, discount, code), and a membership made
/// lifetime by a staff correction, shown as "lifetime".
pub(crate) async fn offers(
    browser: &Browser,
    app: &TestApp,
    base: &str,
    shots: &Shots,
    channel_id: i32,
) {
    let review = app
        .create_channel(-1001000000002, json!({"title": "Weekly review"}))
        .await;
    let review_id = review["id"].as_i64().unwrap() as i32;

    // ---- a plan for the channel, from the channel's page.
    browser
        .goto(&format!("{base}/console/#/channels/{channel_id}"))
        .await;
    browser
        .wait_text("main h1", "Channel: Premium signals")
        .await;
    let plans = browser.wait_text("#channel-plans table", "30 days").await;
    assert!(
        plans.contains("Premium signals") && plans.contains("default"),
        "the default plan: {plans}"
    );
    browser
        .click(&format!(
            "#channel-plans a[href='#/plans/new?channel_id={channel_id}']"
        ))
        .await;
    browser.wait_text("main h1", "New plan").await;
    let first = browser.find("#plan-channel_ids").await;
    assert_eq!(
        browser.value(&first).await,
        channel_id.to_string(),
        "the channel is chosen"
    );
    browser.fill("#plan-title", "Premium yearly").await;
    browser.fill("#plan-price", "1500").await;
    // Past the longest period: the API's 422 is shown next to the field.
    browser.fill("#plan-period_days", "4000").await;
    browser.fill("#plan-position", "1").await;
    browser.click("#plan button[type=submit]").await;
    browser.wait_text("#alert", "period_days").await;
    let slot = browser.find("#plan-period_days-error").await;
    let message = browser.text(&slot).await;
    // The API's "or null (lifetime)", in the form's terms.
    assert!(
        message.contains("or empty (lifetime)"),
        "a message next to the period: {message}"
    );
    let invalid = browser
        .execute(
            "return document.getElementById('plan-period_days').getAttribute('aria-invalid');",
            json!([]),
        )
        .await;
    assert_eq!(invalid, json!("true"));
    shot(browser, shots, "11-plan-error").await;
    assert_eq!(app.count("plans WHERE title = 'Premium yearly'").await, 0);
    browser.fill("#plan-period_days", "365").await;
    browser.fill("#plan-tr-ru-title", "Премиум на год").await;
    browser.click("#plan button[type=submit]").await;
    browser
        .wait_text("#status", "Created plan “Premium yearly”")
        .await;
    browser.wait_text("main h1", "Plan: Premium yearly").await;
    let row = app
        .db()
        .await
        .query_one(
            "SELECT p.id, p.kind, p.price_minor, p.currency, p.period_days, p.position,
                    array_agg(pc.channel_id ORDER BY pc.position), p.translations
             FROM plans p JOIN plan_channels pc ON pc.plan_id = p.id
             WHERE p.title = 'Premium yearly' GROUP BY p.id",
            &[],
        )
        .await
        .unwrap();
    let yearly: i64 = row.get(0);
    assert_eq!(row.get::<_, String>(1), "paid");
    assert_eq!(row.get::<_, i64>(2), 150000, "1500 UAH in minor units");
    assert_eq!(row.get::<_, String>(3), "UAH");
    assert_eq!(row.get::<_, Option<i32>>(4), Some(365));
    assert_eq!(row.get::<_, i32>(5), 1);
    assert_eq!(row.get::<_, Vec<i32>>(6), vec![channel_id]);
    assert_eq!(
        row.get::<_, Value>(7),
        json!({"ru": {"title": "Премиум на год", "description": null}})
    );
    let buy_link = browser.find("#plan-buy-link").await;
    assert_eq!(
        browser.value(&buy_link).await,
        format!("https://t.me/SubGateBot?start=p{yearly}")
    );

    // ---- a lifetime bundle of both channels, from the plans screen.
    browser.click("a[href='#/plans']").await;
    browser.wait_text("main h1", "Plans").await;
    browser.wait_text("main table", "Premium yearly").await;
    browser.click("main a[href='#/plans/new']").await;
    browser.wait_text("main h1", "New plan").await;
    browser.select("#plan-channel_ids", "Premium signals").await;
    browser
        .fill("#plan-title", "Signals and review, forever")
        .await;
    browser.fill("#plan-price", "4000").await;
    browser.click("#plan-lifetime").await;
    browser.click(&format!("#plan-bundle-{review_id}")).await;
    browser.click("#plan button[type=submit]").await;
    browser
        .wait_text("#status", "Created plan “Signals and review, forever”")
        .await;
    browser
        .wait_text("main h1", "Plan: Signals and review, forever")
        .await;
    let row = app
        .db()
        .await
        .query_one(
            "SELECT p.period_days, array_agg(pc.channel_id ORDER BY pc.position)
             FROM plans p JOIN plan_channels pc ON pc.plan_id = p.id
             WHERE p.title = 'Signals and review, forever' GROUP BY p.id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<i32>>(0), None, "lifetime");
    assert_eq!(row.get::<_, Vec<i32>>(1), vec![channel_id, review_id]);

    // ---- the channel's page lists its plans.
    browser
        .click(&format!("main a[href='#/channels/{channel_id}']"))
        .await;
    browser
        .wait_text("main h1", "Channel: Premium signals")
        .await;
    let plans = browser.wait_text("#channel-plans", "Premium yearly").await;
    assert!(
        plans.contains("365 days") && plans.contains("UAH 1,500.00"),
        "{plans}"
    );
    assert!(
        plans.contains("Signals and review, forever")
            && plans.contains("lifetime")
            && plans.contains("bundle")
            && plans.contains("Weekly review"),
        "{plans}"
    );
    shot(browser, shots, "12-channel-plans").await;

    // ---- a promo code for the yearly plan.
    browser.click("a[href='#/promo-codes']").await;
    browser.wait_text("main h1", "Promo codes").await;
    browser.click("main a[href='#/promo-codes/new']").await;
    browser.wait_text("main h1", "New promo code").await;
    browser.fill("#promo-code", "spring25").await;
    browser.select("#promo-discount", "percent off").await;
    browser.fill("#promo-percent_off", "25").await;
    browser.fill("#promo-max_redemptions", "10").await;
    browser.click(&format!("#promo-plan-{yearly}")).await;
    browser.click("#promo button[type=submit]").await;
    browser
        .wait_text("#status", "Created promo code SPRING25")
        .await;
    browser.wait_text("main h1", "Promo codes").await;
    let list = browser.wait_text("main table", "SPRING25").await;
    assert!(
        list.contains("25 % off") && list.contains("0 of 10") && list.contains("Premium yearly"),
        "{list}"
    );
    let row = app
        .db()
        .await
        .query_one(
            "SELECT percent_off, plan_ids, max_redemptions, per_buyer_limit, active
             FROM promo_codes WHERE code = 'SPRING25'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<i32>>(0), Some(25));
    assert_eq!(row.get::<_, Option<Vec<i64>>>(1), Some(vec![yearly]));
    assert_eq!(row.get::<_, Option<i32>>(2), Some(10));
    assert_eq!(row.get::<_, i32>(3), 1);
    assert!(row.get::<_, bool>(4));

    // ---- a buyer orders the plan with the code (any case) and pays the discounted price.
    let cat = app.create_subscriber(100000003).await;
    let cat_id = cat["id"].as_i64().unwrap();
    let order = app
        .post(
            "/api/orders",
            json!({"subscriber_id": cat_id, "plan_id": yearly, "promo_code": "Spring25"}),
        )
        .await
        .expect(201);
    assert_eq!(order["list_price_minor"], 150000);
    assert_eq!(order["discount_minor"], 37500);
    assert_eq!(order["amount_minor"], 112500);
    assert_eq!(order["promo_code"], "SPRING25");
    let r = app.pay_order(&order, "pay-promo-1").await.expect(200);
    assert_eq!(r["payment"]["outcome"], "applied");

    // Its use is counted (the list is read again when shown); then the code is deactivated
    // from the list.
    browser.click("a[href='#/plans']").await;
    browser.wait_text("main h1", "Plans").await;
    browser.click("a[href='#/promo-codes']").await;
    browser.wait_text("main h1", "Promo codes").await;
    browser.wait_text("main table", "1 of 10").await;
    shot(browser, shots, "13-promo-codes").await;
    browser
        .click("button[aria-label='Deactivate promo code SPRING25']")
        .await;
    browser
        .wait_text("#status", "Promo code SPRING25 is deactivated")
        .await;
    browser.wait_text("main table", "inactive").await;
    let active: bool = app
        .db()
        .await
        .query_one(
            "SELECT active FROM promo_codes WHERE code = 'SPRING25'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!active, "deactivated");
    let refused = app
        .post(
            "/api/orders",
            json!({"subscriber_id": cat_id, "plan_id": yearly, "promo_code": "SPRING25"}),
        )
        .await;
    assert_eq!(
        refused.status.as_u16(),
        422,
        "an inactive code sells nothing"
    );

    // ---- the buyer's page: the order's list price, discount and code.
    browser
        .goto(&format!("{base}/console/#/subscribers/{cat_id}"))
        .await;
    browser
        .wait_text("main h1", "Subscriber @user100000003")
        .await;
    let orders = browser.wait_text("#sub-orders + *", "SPRING25").await;
    assert!(
        orders.contains("Premium yearly")
            && orders.contains("UAH 1,500.00")
            && orders.contains("− UAH 375.00")
            && orders.contains("UAH 1,125.00"),
        "list price, discount, amount: {orders}"
    );
    // Lifetime access, given by a staff correction, is shown as such.
    let membership: i64 = app
        .db()
        .await
        .query_one(
            "SELECT id FROM memberships WHERE subscriber_id = $1",
            &[&(cat_id as i32)],
        )
        .await
        .unwrap()
        .get(0);
    browser
        .click(&format!(
            "main table button[aria-controls='correct-{membership}']"
        ))
        .await;
    browser
        .click(&format!("#correct-{membership}-lifetime"))
        .await;
    browser
        .click(&format!("#correct-{membership} button[type=submit]"))
        .await;
    browser
        .wait_text("#status", "Corrected: active for life.")
        .await;
    let memberships = browser.wait_text("#sub-memberships + *", "lifetime").await;
    assert!(memberships.contains("Premium signals"), "{memberships}");
    let lifetime: bool = app
        .db()
        .await
        .query_one(
            "SELECT expires_at = 'infinity' FROM memberships WHERE id = $1",
            &[&membership],
        )
        .await
        .unwrap()
        .get(0);
    assert!(lifetime, "expires_at is infinity");
    shot(browser, shots, "14-subscriber-discount").await;
}
