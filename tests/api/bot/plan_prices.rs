//! What a plan costs in the bot: `/code` keeps a usable code and says what it gives or why not,
//! a code that stopped working by the press is explained, invoices and card links at the plan's
//! terms and the order's amount, and a 100 % code that grants without an invoice.
//!
//! Discounts go through `promo_codes::discount_for_new_order`; plans and codes are written with
//! SQL (see `plans`).

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::{
    bot::{
        conversation::{
            ON_ITS_WAY, app_with, assert_answer, button_update, buttons, channel, membership_of,
            person, pre_checkout_update, run, send, stars_channel, text_update,
        },
        plans::{assert_contains, orders_of, paid_plan, plan, promo, subscriber, text},
    },
    support::{fake_bot::FakeBot, helpers::TestApp},
};

#[tokio::test]
async fn code_keeps_a_usable_code_says_what_it_gives_or_why_not() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_700_031, json!({"title": "Daily"})).await;
    let yearly = paid_plan(&app, &[c], "Yearly", 2000, Some(365)).await;
    promo(&app, "OK25", 25, None, "").await;
    promo(
        &app,
        "OLD",
        10,
        None,
        "expires_at = now() - interval '1 day'",
    )
    .await;
    promo(&app, "OFF", 10, None, "active = false").await;
    let full = promo(&app, "FULL1", 10, None, "max_redemptions = 1").await;
    promo(&app, "ONLYYEAR", 50, Some(vec![yearly]), "").await;
    app.db()
        .await
        .execute(
            "INSERT INTO promo_codes (code, amount_off_minor, currency) VALUES ('EURO', 100, 'EUR')",
            &[],
        )
        .await
        .unwrap();
    // FULL1's one use is taken by someone's paid order.
    let other = subscriber(&app, 7_900_031).await;
    app.db()
        .await
        .execute(
            "INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency,
                                 list_price_minor, discount_minor, promo_code_id, status,
                                 paid_at)
             VALUES ('ord_full1', $1, $2, 225, 'XTR', 250, 25, $3, 'paid', now())",
            &[&other, &(c as i32), &full],
        )
        .await
        .unwrap();
    let buyer = person(7331);
    let said = |reply: Value| text(&reply).to_string();

    assert_eq!(
        said(send(&app, &text_update(&buyer, "/code")).await),
        "Send /code followed by your promo code, for example: /code SPRING25"
    );
    assert_eq!(
        said(send(&app, &text_update(&buyer, "/code ok25")).await),
        "Code OK25 applied: −25 % on every plan. It is kept for your next order for one hour; \
         the prices with it are shown in /start."
    );
    for (code, why) in [
        ("nope", "NOPE cannot be used: there is no such code."),
        ("x", "X cannot be used: there is no such code."),
        ("old", "OLD cannot be used: it has expired."),
        // An inactive code reads as an unknown one (guessing tells nothing).
        ("off", "OFF cannot be used: there is no such code."),
        ("full1", "FULL1 cannot be used: it has been used up."),
        ("euro", "EURO cannot be used: no plan on sale takes it."),
    ] {
        assert_eq!(
            said(send(&app, &text_update(&buyer, &format!("/code {code}"))).await),
            format!("Sorry, the code {why}"),
        );
    }
    // The refusals kept the good code: the catalogue shows its prices.
    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert_eq!(
        buttons(&reply),
        [
            (
                "Buy: Daily · 188 ⭐, was 250 ⭐".to_string(),
                format!("b:{c}")
            ),
            (
                "Buy: Yearly · 1500 ⭐, was 2000 ⭐".to_string(),
                format!("p:{yearly}")
            ),
        ]
    );
    // A code for one plan names it, and changes only its price.
    assert_eq!(
        said(send(&app, &text_update(&buyer, "/code ONLYYEAR")).await),
        "Code ONLYYEAR applied: −50 % on Yearly. It is kept for your next order for one hour; \
         the prices with it are shown in /start."
    );
    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert_eq!(
        buttons(&reply),
        [
            ("Buy: Daily · 250 ⭐".to_string(), format!("b:{c}")),
            (
                "Buy: Yearly · 1000 ⭐, was 2000 ⭐".to_string(),
                format!("p:{yearly}")
            ),
        ]
    );
    assert_eq!(app.count("bot_promo_codes").await, 1);
}

#[tokio::test]
async fn a_code_that_cannot_be_used_at_the_press_is_explained_and_the_next_press_pays_the_list_price()
 {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_700_041, json!({"title": "Morning"})).await;
    let code = promo(&app, "ONCE", 25, None, "max_redemptions = 1").await;
    let buyer = person(7341);
    send(&app, &text_update(&buyer, "/code ONCE")).await;
    // Someone else uses it up meanwhile.
    let other = subscriber(&app, 7_900_041).await;
    app.db()
        .await
        .execute(
            "INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency,
                                 list_price_minor, discount_minor, promo_code_id, status,
                                 paid_at)
             VALUES ('ord_once', $1, $2, 188, 'XTR', 250, 62, $3, 'paid', now())",
            &[&other, &(c as i32), &code],
        )
        .await
        .unwrap();
    let reply = send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    assert_answer(
        &reply,
        "Your code ONCE cannot be used for this order (it has been used up). Press the button \
         again to buy at the full price of 250 ⭐.",
    );
    assert_eq!(reply["show_alert"], true);
    assert!(orders_of(&app, 7341).await.is_empty());
    assert_eq!(app.count("bot_promo_codes").await, 0);

    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ON_ITS_WAY,
    );
    let orders = orders_of(&app, 7341).await;
    assert_eq!(orders.len(), 1);
    assert_eq!(
        (orders[0].1, orders[0].2, orders[0].3, orders[0].4),
        (250, 250, 0, None)
    );
}

// ---- invoices ----

/// Gives `user`'s newest order a discount of `off` with code `code_id`, as a code would have
/// (the order the invoice effect then reads).
async fn discount_order(app: &TestApp, user: i64, code_id: i64, off: i64) {
    app.db()
        .await
        .execute(
            "UPDATE orders o SET discount_minor = $3, amount_minor = list_price_minor - $3,
                    promo_code_id = $2, promo_held_until = now() + interval '5 minutes'
             FROM subscribers s
             WHERE s.id = o.subscriber_id AND s.telegram_user_id = $1
               AND o.id = (SELECT max(id) FROM orders WHERE subscriber_id = s.id)",
            &[&user, &code_id, &off],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn the_invoice_has_the_plans_terms_and_the_orders_amount() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(
        &app,
        -100_700_051,
        json!({"title": "Big channel", "description": "The channel."}),
    )
    .await;
    let yearly = paid_plan(&app, &[c], "Yearly", 2000, Some(365)).await;
    app.db()
        .await
        .execute(
            "UPDATE plans SET description = 'A whole year.' WHERE id = $1",
            &[&yearly],
        )
        .await
        .unwrap();
    let forever = paid_plan(&app, &[c], "Forever", 5000, None).await;
    let code = promo(&app, "YEAR25", 25, None, "").await;

    let buyer = person(7351);
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("p:{yearly}"))).await,
        ON_ITS_WAY,
    );
    let orders = orders_of(&app, 7351).await;
    assert_eq!(orders[0].0, yearly);
    assert_eq!((orders[0].1, orders[0].2), (2000, 2000));
    discount_order(&app, 7351, code, 500).await;
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("p:{forever}"))).await,
        ON_ITS_WAY,
    );
    run(&app).await;
    let invoices = fake.calls_of("sendInvoice");
    assert_eq!(invoices.len(), 2);
    let by_title: HashMap<String, Value> = invoices
        .iter()
        .map(|c| {
            (
                c.params["title"].as_str().unwrap().to_string(),
                c.params.clone(),
            )
        })
        .collect();
    let y = &by_title["Yearly"];
    assert_eq!(y["description"], "A whole year.");
    assert_eq!(
        y["prices"],
        json!([{"label": "365 days of access", "amount": 1500}])
    );
    let f = &by_title["Forever"];
    assert_eq!(f["description"], "Lifetime access to «Forever».");
    assert_eq!(
        f["prices"],
        json!([{"label": "Lifetime access", "amount": 5000}])
    );
    // Telegram's pre-checkout at the order's amount.
    let reference: String = app
        .db()
        .await
        .query_one(
            "SELECT reference FROM orders WHERE plan_id = $1",
            &[&yearly],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(y["payload"], reference);
    let ok = send(&app, &pre_checkout_update("q-7351", 7351, &reference, 1500)).await;
    assert_eq!(ok["ok"], true, "{ok}");
}

#[tokio::test]
async fn a_card_plans_purchase_link_is_at_the_orders_amount_with_the_plans_name() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = channel(&app, -100_700_061, json!({"title": "Card club"})).await;
    let yearly = plan(
        &app,
        &[c],
        "Card yearly",
        "paid",
        199_000,
        "UAH",
        Some(365),
        0,
    )
    .await;
    let code = promo(&app, "CARD25", 25, None, "").await;
    let buyer = person(7361);
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("p:{yearly}"))).await,
        ON_ITS_WAY,
    );
    discount_order(&app, 7361, code, 49_750).await;
    run(&app).await;
    let message = &fake.calls_of("sendMessage")[0].params;
    assert_eq!(
        message["text"]
            .as_str()
            .unwrap()
            .split(" The payment page")
            .next()
            .unwrap(),
        "Pay 1492.50 UAH by card for 365 days of access to «Card yearly»."
    );
    let (label, link) = buttons(message)[0].clone();
    assert_eq!(label, "Pay 1492.50 UAH by card");
    let q: HashMap<String, String> = url::Url::parse(&link)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    assert_eq!(q["amount"], "1492.50");
    assert_eq!(q["productPrice[]"], "1492.50");
    assert_eq!(q["productName[]"], "Card yearly");
}

// ---- through the promo code decision (`promo_codes::discount_for_new_order`) ----

#[tokio::test]
async fn an_order_made_with_a_code_is_invoiced_at_its_discounted_price() {
    // Needs `promo_codes::discount_for_new_order` (its stub refuses every code).
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_700_091, json!({"title": "Coded"})).await;
    let card = channel(&app, -100_700_092, json!({"title": "Coded card"})).await;
    let code = promo(&app, "TAKE25", 25, None, "per_buyer_limit = 5").await;
    let buyer = person(7391);
    send(&app, &text_update(&buyer, "/code TAKE25")).await;
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{c}"))).await,
        ON_ITS_WAY,
    );
    let orders = orders_of(&app, 7391).await;
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_eq!(
        (orders[0].1, orders[0].2, orders[0].3, orders[0].4),
        (188, 250, 62, Some(code))
    );
    assert_eq!(app.count("bot_promo_codes").await, 0, "used by the order");
    // Pressed again: the same order, not one at the list price.
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    assert_eq!(orders_of(&app, 7391).await.len(), 1);
    run(&app).await;
    assert_eq!(
        fake.calls_of("sendInvoice")[0].params["prices"],
        json!([{"label": "30 days of access", "amount": 188}])
    );

    send(&app, &text_update(&buyer, "/code TAKE25")).await;
    assert_answer(
        &send(&app, &button_update(&buyer, &format!("b:{card}"))).await,
        ON_ITS_WAY,
    );
    fake.clear_calls();
    run(&app).await;
    let (label, link) = buttons(&fake.calls_of("sendMessage")[0].params)[0].clone();
    assert_eq!(label, "Pay 149.25 UAH by card");
    assert!(link.contains("amount=149.25"), "{link}");
}

#[tokio::test]
async fn a_hundred_percent_code_grants_without_an_invoice() {
    // Needs both `promo_codes::discount_for_new_order` and `orders::trials::claim`.
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_700_121, json!({"title": "Gift"})).await;
    promo(&app, "GIFT", 100, None, "").await;
    let buyer = person(7421);
    assert_contains(
        text(&send(&app, &text_update(&buyer, "/code gift")).await),
        &["Code GIFT applied: −100 % on every plan."],
    );
    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert_eq!(buttons(&reply)[0].0, "Buy: Gift · 0 ⭐, was 250 ⭐");
    let reply = send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    assert_answer(
        &reply,
        "Done! Your free access to «Gift» has started. Your join link is on its way.",
    );
    assert_eq!(membership_of(&app, 7421, c).await.unwrap().0, "active");
    let orders = orders_of(&app, 7421).await;
    assert_eq!(
        (orders[0].1, orders[0].3, orders[0].5.as_str()),
        (0, 250, "paid")
    );
    assert_eq!(app.count("effects WHERE kind = 'invoice'").await, 0);
}
