//! The bot sells plans: the catalogue of each channel's plans (cheapest first, then position;
//! bundles under their first channel; trials only for buyers who can use them; lifetime), deep
//! links `p<plan>` and `p<plan>-CODE`, lifetime re-buys refused, the renew button, and trials
//! granted once. What a plan costs after a code is in `plan_prices`.
//!
//! Plans and promo codes are written with SQL here (their staff routes are tested with them).
//! Free grants go through `orders::trials::claim`; the tests of that path say so in their
//! names' comments.

use std::sync::Arc;

use chrono::{Duration, Utc};
use serde_json::{Value, json};

use crate::{
    bot::conversation::{
        app_with, assert_answer, button_update, buttons, membership_of, one_i64, person, send,
        stars_channel, text_update,
    },
    support::{
        fake_bot::FakeBot,
        helpers::{NewPlan, TestApp, db_now},
        race::race,
        rows::count,
    },
};

/// A plan of `channels` (the first is the plan's first channel); returns its id.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn plan(
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

pub(crate) async fn paid_plan(
    app: &TestApp,
    channels: &[i64],
    title: &str,
    price: i64,
    days: Option<i32>,
) -> i64 {
    plan(app, channels, title, "paid", price, "XTR", days, 0).await
}

/// A promo code; `extra` is SQL assignments applied after the insert (`max_redemptions = 1`).
pub(crate) async fn promo(
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

pub(crate) async fn subscriber(app: &TestApp, user: i64) -> i32 {
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
pub(crate) async fn orders_of(
    app: &TestApp,
    user: i64,
) -> Vec<(i64, i64, i64, i64, Option<i64>, String)> {
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
            "Here are the channels and groups you can join:",
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
        app.count("effects WHERE kind = 'invoice'").await,
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
        let mut granted = 0;
        for reply in race(10, |_| {
            let app = app.clone();
            let press = button_update(&buyer, &format!("p:{trial}"));
            async move { send(&app, &press).await }
        })
        .await
        {
            if text(&reply).starts_with("Done!") {
                granted += 1;
            }
        }
        assert_eq!(granted, 1, "round {round}");
        assert_eq!(
            count(
                &app,
                "trial_uses t JOIN subscribers s ON s.id = t.subscriber_id
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
