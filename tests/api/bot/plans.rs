//! The bot sells plans: the catalogue of each channel's plans (cheapest first, then position;
//! bundles under their first channel; trials only for buyers who can use them; lifetime),
//! deep links `p<plan>` and `p<plan>-CODE`, `/code`, prices after a code, invoices at the plan's
//! terms and the order's amount, lifetime re-buys refused, and free grants (trials, 100 % codes).
//!
//! Plans and promo codes are written with SQL here (their staff routes are tested with them).
//! Free grants go through `orders::trials::claim` and discounts through
//! `promo_codes::discount_for_new_order`; the tests of those paths say so in their names'
//! comments.

use std::{collections::HashMap, sync::Arc};

use chrono::{Duration, Utc};
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::{
    bot::conversation::{
        ON_ITS_WAY, app_with, assert_answer, button_update, buttons, channel, membership_of,
        one_i64, person, pre_checkout_update, run, send, stars_channel, text_update,
    },
    support::{
        fake_bot::FakeBot,
        helpers::{NewPlan, TestApp, db_now},
    },
};

/// A plan of `channels` (the first is the plan's first channel); returns its id.
#[allow(clippy::too_many_arguments)]
async fn plan(
    app: &TestApp,
    channels: &[i64],
    title: &str,
    kind: &str,
    price_minor: i64,
    currency: &str,
    period_days: Option<i32>,
    position: i32,
) -> i64 {
    let plan = NewPlan {
        title,
        kind,
        price_minor,
        currency,
        period_days,
        position,
    };
    app.insert_plan(plan, channels).await
}

async fn paid_plan(
    app: &TestApp,
    channels: &[i64],
    title: &str,
    price: i64,
    days: Option<i32>,
) -> i64 {
    plan(app, channels, title, "paid", price, "XTR", days, 0).await
}

/// A promo code; `extra` is SQL assignments applied after the insert (`max_redemptions = 1`).
async fn promo(
    app: &TestApp,
    code: &str,
    percent_off: i32,
    plan_ids: Option<Vec<i64>>,
    extra: &str,
) -> i64 {
    let db = app.db().await;
    let id: i64 = db
        .query_one(
            "INSERT INTO promo_codes (code, percent_off, plan_ids) VALUES ($1, $2, $3)
             RETURNING id",
            &[&code, &percent_off, &plan_ids],
        )
        .await
        .unwrap()
        .get(0);
    if !extra.is_empty() {
        db.execute(
            &format!("UPDATE promo_codes SET {extra} WHERE id = $1"),
            &[&id],
        )
        .await
        .unwrap();
    }
    id
}

async fn subscriber(app: &TestApp, user: i64) -> i32 {
    app.db()
        .await
        .query_one(
            "INSERT INTO subscribers (telegram_user_id) VALUES ($1)
             ON CONFLICT (telegram_user_id) DO UPDATE SET username = subscribers.username
             RETURNING id",
            &[&user],
        )
        .await
        .unwrap()
        .get(0)
}

/// A membership of `user` in `channel` ending at `expires_at` (SQL: `'infinity'`, …).
async fn member(app: &TestApp, user: i64, channel: i64, status: &str, expires_at: &str) {
    let s = subscriber(app, user).await;
    app.db()
        .await
        .execute(
            &format!(
                "INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
                 VALUES ($1, $2, $3, {expires_at})"
            ),
            &[&s, &(channel as i32), &status],
        )
        .await
        .unwrap();
}

/// `(plan_id, amount, list price, discount, promo code id, status)` of `user`'s orders, by id.
async fn orders_of(app: &TestApp, user: i64) -> Vec<(i64, i64, i64, i64, Option<i64>, String)> {
    app.db()
        .await
        .query(
            "SELECT o.plan_id, o.amount_minor, o.list_price_minor, o.discount_minor,
                    o.promo_code_id, o.status
             FROM orders o JOIN subscribers s ON s.id = o.subscriber_id
             WHERE s.telegram_user_id = $1 ORDER BY o.id",
            &[&user],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect()
}

pub(crate) fn text(reply: &Value) -> &str {
    reply["text"].as_str().unwrap()
}

#[track_caller]
pub(crate) fn assert_contains(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{part:?} missing in {text}");
    }
}

// ---- the catalogue ----

#[tokio::test]
async fn the_catalogue_lists_each_channels_plans_cheapest_first_then_by_position() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let club = stars_channel(&app, -100_700_001, json!({"title": "Club"})).await;
    let extra = stars_channel(&app, -100_700_002, json!({"title": "Extra"})).await;
    let full = stars_channel(
        &app,
        -100_700_003,
        json!({"title": "Full one", "seat_limit": 1}),
    )
    .await;
    let yearly = paid_plan(&app, &[club], "Yearly", 2000, Some(365)).await;
    let week_b = plan(&app, &[club], "Week B", "paid", 100, "XTR", Some(7), 2).await;
    let week_a = plan(&app, &[club], "Week A", "paid", 100, "XTR", Some(7), 1).await;
    let forever = paid_plan(&app, &[club], "Forever", 5000, None).await;
    let hidden = paid_plan(&app, &[club], "Hidden", 10, Some(30)).await;
    app.db()
        .await
        .execute("UPDATE plans SET active = false WHERE id = $1", &[&hidden])
        .await
        .unwrap();
    let both = paid_plan(&app, &[club, extra], "Both", 400, Some(30)).await;
    paid_plan(&app, &[full], "Full yearly", 2000, Some(365)).await;
    member(
        &app,
        7_900_001,
        full,
        "active",
        "now() + interval '10 days'",
    )
    .await;

    let reply = send(&app, &text_update(&person(7301), "/start")).await;
    let t = text(&reply);
    assert_contains(
        t,
        &[
            "1. Club",
            "• Week A: 100 ⭐ for 7 days",
            "• Club: 250 ⭐ for 30 days",
            "• Both: 400 ⭐ for 30 days\n  Also gives access to «Extra».",
            "• Yearly: 2000 ⭐ for 365 days",
            "• Forever: 5000 ⭐, lifetime access",
            // A channel sold one way reads as it always did.
            "2. Extra\n250 ⭐ for 30 days",
            "3. Full one",
            "• Full yearly: 2000 ⭐ for 365 days\n  Full right now: no free seats.",
        ],
    );
    assert!(!t.contains("Hidden"), "{t}");
    assert_eq!(t.matches("Both").count(), 1, "a bundle is listed once: {t}");
    let b = |text: &str, data: String| (text.to_string(), data);
    assert_eq!(
        buttons(&reply),
        [
            b("Buy: Week A · 100 ⭐", format!("p:{week_a}")),
            b("Buy: Week B · 100 ⭐", format!("p:{week_b}")),
            b("Buy: Club · 250 ⭐", format!("b:{club}")),
            b("Buy: Both · 400 ⭐", format!("p:{both}")),
            b("Buy: Yearly · 2000 ⭐", format!("p:{yearly}")),
            b("Buy: Forever · 5000 ⭐", format!("p:{forever}")),
            b("Buy: Extra · 250 ⭐", format!("b:{extra}")),
        ]
    );

    // The channel's own link shows every plan with it, the bundle included.
    let reply = send(
        &app,
        &text_update(&person(7301), &format!("/start c{extra}")),
    )
    .await;
    assert_contains(text(&reply), &["Extra", "• Both: 400 ⭐ for 30 days"]);
    assert_eq!(
        buttons(&reply),
        [
            b("Buy: Extra · 250 ⭐", format!("b:{extra}")),
            b("Buy: Both · 400 ⭐", format!("p:{both}")),
        ]
    );
}

#[tokio::test]
async fn the_trial_button_is_shown_only_to_buyers_who_can_still_use_it() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_700_011, json!({"title": "Trial club"})).await;
    let trial = plan(&app, &[c], "Taster", "trial", 0, "XTR", Some(7), 0).await;

    let fresh = send(&app, &text_update(&person(7311), "/start")).await;
    assert_contains(text(&fresh), &["• Taster: free for 7 days"]);
    assert_eq!(
        buttons(&fresh)[0],
        ("Try free for 7 days".to_string(), format!("p:{trial}"))
    );

    // A former member (expired long ago) and a buyer who had a trial of it see none.
    member(&app, 7312, c, "expired", "now() - interval '100 days'").await;
    let s = subscriber(&app, 7313).await;
    app.db()
        .await
        .execute(
            "WITH o AS (
                 INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor,
                                     currency, plan_id, status, paid_at)
                 VALUES ('ord_trial_7313', $1, $2, 0, 'XTR', $3, 'paid', now()) RETURNING id
             )
             INSERT INTO trial_uses (subscriber_id, channel_id, order_id)
             SELECT $1, $2, id FROM o",
            &[&s, &(c as i32), &trial],
        )
        .await
        .unwrap();
    for user in [7312, 7313] {
        let reply = send(&app, &text_update(&person(user), "/start")).await;
        assert!(!text(&reply).contains("Taster"), "{user}: {reply}");
        assert_eq!(
            buttons(&reply),
            [("Buy: Trial club · 250 ⭐".to_string(), format!("b:{c}"))],
            "{user}"
        );
    }
}

// ---- deep links and codes ----

#[tokio::test]
async fn deep_links_open_one_plan_and_apply_a_code() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_700_021, json!({"title": "Signals"})).await;
    let premium = paid_plan(&app, &[c], "Premium monthly", 300, Some(30)).await;
    app.db()
        .await
        .execute(
            "UPDATE plans SET description = 'Every signal, every day.' WHERE id = $1",
            &[&premium],
        )
        .await
        .unwrap();
    promo(&app, "SPRING", 20, Some(vec![premium]), "").await;
    let buyer = person(7321);

    let reply = send(&app, &text_update(&buyer, &format!("/start p{premium}"))).await;
    assert_contains(
        text(&reply),
        &[
            "Signals",
            "Every signal, every day.",
            "• Premium monthly: 300 ⭐ for 30 days",
        ],
    );
    assert_eq!(
        buttons(&reply),
        [(
            "Buy: Premium monthly · 300 ⭐".to_string(),
            format!("p:{premium}")
        )]
    );

    // With a code (any case): applied, kept for an hour, and the price shown with it.
    let before = db_now(&app).await;
    let reply = send(
        &app,
        &text_update(&buyer, &format!("/start p{premium}-spring")),
    )
    .await;
    assert_contains(
        text(&reply),
        &[
            "Code SPRING applied: −20 % on Premium monthly.",
            "• Premium monthly: 240 ⭐, was 300 ⭐ for 30 days",
        ],
    );
    assert_eq!(
        buttons(&reply),
        [(
            "Buy: Premium monthly · 240 ⭐, was 300 ⭐".to_string(),
            format!("p:{premium}")
        )]
    );
    let until: chrono::DateTime<Utc> = app
        .db()
        .await
        .query_one(
            "SELECT b.until FROM bot_promo_codes b JOIN subscribers s ON s.id = b.subscriber_id
             WHERE s.telegram_user_id = 7321",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        until >= before + Duration::minutes(59) && until <= before + Duration::minutes(61),
        "{until} vs {before}"
    );

    // An unknown code says so and shows the plan at its price; an unknown plan, the catalogue.
    let reply = send(
        &app,
        &text_update(&person(7322), &format!("/start p{premium}-NOPE")),
    )
    .await;
    assert_contains(
        text(&reply),
        &[
            "Sorry, the code NOPE cannot be used: there is no such code.",
            "300 ⭐ for 30 days",
        ],
    );
    let reply = send(&app, &text_update(&buyer, "/start p999999")).await;
    assert_contains(
        text(&reply),
        &[
            "Sorry, this plan is not available.",
            "Here are the channels you can join:",
        ],
    );
    // The default plan's link buys it the way the channel's button does.
    let default_plan = one_i64(
        &app,
        "SELECT id FROM plans WHERE default_of = $1",
        &[&(c as i32)],
    )
    .await;
    let reply = send(
        &app,
        &text_update(&person(7322), &format!("/start p{default_plan}")),
    )
    .await;
    assert_eq!(
        buttons(&reply),
        [("Buy: Signals · 250 ⭐".to_string(), format!("b:{c}"))]
    );
}

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

// ---- lifetime ----

#[tokio::test]
async fn a_buyer_with_lifetime_access_is_told_so_and_no_order_is_made() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_700_071, json!({"title": "Forever club"})).await;
    let forever = paid_plan(&app, &[c], "Forever", 5000, None).await;
    member(&app, 7371, c, "active", "'infinity'").await;
    let buyer = person(7371);

    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert_contains(
        text(&reply),
        &["• Forever: 5000 ⭐, lifetime access\n  You have lifetime access."],
    );
    assert!(buttons(&reply).is_empty(), "{reply}");
    for (data, name) in [
        (format!("p:{forever}"), "Forever"),
        (format!("b:{c}"), "Forever club"),
    ] {
        let reply = send(&app, &button_update(&buyer, &data)).await;
        assert_answer(
            &reply,
            &format!("You already have lifetime access to «{name}». There is nothing more to buy."),
        );
        assert_eq!(reply["show_alert"], true);
    }
    assert!(orders_of(&app, 7371).await.is_empty());

    let reply = send(&app, &text_update(&buyer, "/subscriptions")).await;
    assert_contains(
        text(&reply),
        &["Forever club\nLifetime access: it never expires."],
    );
    assert!(buttons(&reply).is_empty(), "nothing to renew: {reply}");
}

#[tokio::test]
async fn the_renew_button_buys_again_the_plan_last_paid_for_the_channel() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_700_081, json!({"title": "Renewed"})).await;
    let yearly = paid_plan(&app, &[c], "Yearly", 2000, Some(365)).await;
    member(&app, 7381, c, "active", "now() + interval '3 days'").await;
    member(&app, 7382, c, "active", "now() + interval '3 days'").await;
    let s = subscriber(&app, 7381).await;
    app.db()
        .await
        .execute(
            "INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency,
                                 plan_id, status, paid_at)
             VALUES ('ord_y_7381', $1, $2, 2000, 'XTR', $3, 'paid', now())",
            &[&s, &(c as i32), &yearly],
        )
        .await
        .unwrap();
    let reply = send(&app, &text_update(&person(7381), "/subscriptions")).await;
    assert_eq!(
        buttons(&reply),
        [("Renew: Renewed".to_string(), format!("p:{yearly}"))]
    );
    let reply = send(&app, &text_update(&person(7382), "/subscriptions")).await;
    assert_eq!(
        buttons(&reply),
        [("Renew: Renewed".to_string(), format!("b:{c}"))]
    );
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

// ---- free grants (`orders::trials::claim`) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_trial_press_grants_once_and_a_second_is_refused() {
    // Needs `orders::trials::claim` (its stub fails: the press is then answered with nothing).
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    let c = stars_channel(&app, -100_700_101, json!({"title": "Tasting"})).await;
    let trial = plan(&app, &[c], "Taster", "trial", 0, "XTR", Some(7), 0).await;
    let buyer = person(7401);
    let reply = send(&app, &button_update(&buyer, &format!("p:{trial}"))).await;
    assert_answer(
        &reply,
        "Done! Your free access to «Tasting» has started. Your join link is on its way.",
    );
    let (status, expires_at) = membership_of(&app, 7401, c).await.unwrap();
    assert_eq!(status, "active");
    let now = db_now(&app).await;
    assert!((expires_at - (now + Duration::days(7))).num_minutes().abs() < 5);
    assert_eq!(app.count("trial_uses").await, 1);
    assert_eq!(
        one_i64(
            &app,
            "SELECT count(*) FROM effects WHERE kind = 'invoice'",
            &[]
        )
        .await,
        0,
        "a free order is never invoiced"
    );
    let again = send(&app, &button_update(&buyer, &format!("p:{trial}"))).await;
    assert_answer(
        &again,
        "You already had a trial or a membership of «Tasting»: the free trial is for new members only.",
    );
    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert!(!text(&reply).contains("Taster"), "{reply}");

    // Ten presses at once by new buyers' twins: one trial each, never two.
    for round in 0..5 {
        let user = 7_410 + round;
        let buyer = person(user);
        let barrier = Arc::new(Barrier::new(10));
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let (app, barrier) = (app.clone(), barrier.clone());
                let press = button_update(&buyer, &format!("p:{trial}"));
                tokio::spawn(async move {
                    barrier.wait().await;
                    send(&app, &press).await
                })
            })
            .collect();
        let mut granted = 0;
        for t in tasks {
            if text(&t.await.unwrap()).starts_with("Done!") {
                granted += 1;
            }
        }
        assert_eq!(granted, 1, "round {round}");
        assert_eq!(
            one_i64(
                &app,
                "SELECT count(*) FROM trial_uses t JOIN subscribers s ON s.id = t.subscriber_id
                 WHERE s.telegram_user_id = $1",
                &[&user]
            )
            .await,
            1,
            "round {round}"
        );
    }
}

#[tokio::test]
async fn a_trial_of_a_full_channel_is_refused_clearly() {
    // Needs `orders::trials::claim`.
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(
        &app,
        -100_700_111,
        json!({"title": "Tiny", "seat_limit": 1}),
    )
    .await;
    let trial = plan(&app, &[c], "Tiny trial", "trial", 0, "XTR", Some(3), 0).await;
    member(&app, 7_900_111, c, "active", "now() + interval '10 days'").await;
    let reply = send(&app, &button_update(&person(7411), &format!("p:{trial}"))).await;
    assert_answer(
        &reply,
        "Sorry, «Tiny» is full right now. Please try again later.",
    );
    assert!(orders_of(&app, 7411).await.is_empty());
    assert!(membership_of(&app, 7411, c).await.is_none());
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
    assert_eq!(
        one_i64(
            &app,
            "SELECT count(*) FROM effects WHERE kind = 'invoice'",
            &[]
        )
        .await,
        0
    );
}
