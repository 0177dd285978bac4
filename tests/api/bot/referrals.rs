//! Referral links in the bot: `/start r_<code>` (and `r_<code>-p<plan>`) records a click with
//! what it came to and attributes the buyer by the program's rule — first or last click, within
//! the window, never to themselves — while the buyer sees what a plain `/start` shows; clicks of
//! one buyer raced end with one attribution the clicks agree with; and `/referral` gives a buyer
//! their own link, the same one each time, or says politely that there is none.
//!
//! The program is set with plain SQL and affiliates are inserted directly: the staff API for
//! them has tests of its own.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::{
    bot::{
        conversation::{BOT, ROUNDS, app_with, buttons, person, send, stars_channel, text_update},
        plans::{assert_contains, paid_plan, subscriber, text},
    },
    support::{fake_bot::FakeBot, helpers::TestApp, race::race, rows::count},
};

const CATALOGUE: &str = "Here are the channels and groups you can join:";

/// Sets the program: `sets` are SQL assignments (`enabled = true, attribution = 'last_click'`).
async fn program(app: &TestApp, sets: &str) {
    app.db()
        .await
        .execute(&format!("UPDATE referral_program SET {sets}"), &[])
        .await
        .unwrap();
}

/// An affiliate with `code`, a buyer's when `subscriber_id` is given; returns its id.
async fn affiliate(app: &TestApp, code: &str, subscriber_id: Option<i32>) -> i32 {
    app.db()
        .await
        .query_one(
            "INSERT INTO affiliates (name, code, subscriber_id) VALUES ($1, $1, $2) RETURNING id",
            &[&code, &subscriber_id],
        )
        .await
        .unwrap()
        .get("id")
}

/// `(affiliate_id, outcome)` of Telegram user `user`'s clicks, oldest first.
async fn clicks_of(app: &TestApp, user: i64) -> Vec<(i32, String)> {
    app.db()
        .await
        .query(
            "SELECT c.affiliate_id, c.outcome FROM referral_clicks c
             JOIN subscribers s ON s.id = c.subscriber_id
             WHERE s.telegram_user_id = $1 ORDER BY c.id",
            &[&user],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("affiliate_id"), r.get("outcome")))
        .collect()
}

/// `(affiliate_id, attributed_at)` of Telegram user `user`'s attribution.
async fn attribution_of(app: &TestApp, user: i64) -> Option<(i32, DateTime<Utc>)> {
    app.db()
        .await
        .query_opt(
            "SELECT a.affiliate_id, a.attributed_at FROM referral_attributions a
             JOIN subscribers s ON s.id = a.subscriber_id
             WHERE s.telegram_user_id = $1",
            &[&user],
        )
        .await
        .unwrap()
        .map(|r| (r.get("affiliate_id"), r.get("attributed_at")))
}

/// Moves `user`'s attribution `days` into the past.
async fn age_attribution(app: &TestApp, user: i64, days: i32) {
    app.db()
        .await
        .execute(
            "UPDATE referral_attributions a
             SET attributed_at = attributed_at - make_interval(days => $2)
             FROM subscribers s WHERE s.id = a.subscriber_id AND s.telegram_user_id = $1",
            &[&user, &days],
        )
        .await
        .unwrap();
}

/// Telegram user `user` follows `payload`'s link; asserts the catalogue is what they see.
async fn click(app: &TestApp, user: i64, payload: &str) -> Value {
    let reply = send(
        app,
        &text_update(&person(user), &format!("/start {payload}")),
    )
    .await;
    assert_eq!(reply["method"], "sendMessage", "{reply}");
    assert_contains(text(&reply), &[CATALOGUE]);
    reply
}

fn outcomes(clicks: &[(i32, String)]) -> Vec<(i32, &str)> {
    clicks.iter().map(|(a, o)| (*a, o.as_str())).collect()
}

#[tokio::test]
async fn first_click_attributes_once_within_the_window_and_refuses_self_referral() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_960_001, json!({"title": "Signals"})).await;
    program(&app, "enabled = true, window_days = 30").await;
    let ann = affiliate(&app, "ANN", None).await;
    let bob = affiliate(&app, "BOB_2026", None).await;

    // A code in any case; the buyer sees the catalogue, as after a plain /start.
    let reply = click(&app, 7_601, "r_ann").await;
    assert_eq!(
        buttons(&reply),
        [("Buy: Signals · 250 ⭐".to_string(), format!("b:{c}"))]
    );
    let (by, at) = attribution_of(&app, 7_601).await.unwrap();
    assert_eq!(by, ann);
    // Another affiliate within the window, or the same again: counted, the attribution kept.
    click(&app, 7_601, "r_BOB_2026").await;
    click(&app, 7_601, "r_ANN").await;
    assert_eq!(attribution_of(&app, 7_601).await, Some((ann, at)));
    assert_eq!(
        outcomes(&clicks_of(&app, 7_601).await),
        [(ann, "attributed"), (bob, "kept"), (ann, "kept")]
    );

    // Once the window has run out, the next click attributes anew.
    age_attribution(&app, 7_601, 29).await;
    click(&app, 7_601, "r_bob_2026").await;
    assert_eq!(attribution_of(&app, 7_601).await.unwrap().0, ann);
    age_attribution(&app, 7_601, 1).await;
    click(&app, 7_601, "r_bob_2026").await;
    let (by, again) = attribution_of(&app, 7_601).await.unwrap();
    assert_eq!(by, bob);
    assert!(again > at, "{again} after {at}");
    assert_eq!(
        outcomes(&clicks_of(&app, 7_601).await)[3..],
        [(bob, "kept"), (bob, "attributed")]
    );

    // A buyer's own link does not attribute them to themselves.
    let own = affiliate(&app, "MYSELF", Some(subscriber(&app, 7_602).await)).await;
    click(&app, 7_602, "r_myself").await;
    assert_eq!(attribution_of(&app, 7_602).await, None);
    assert_eq!(outcomes(&clicks_of(&app, 7_602).await), [(own, "self")]);
    // …but it brings others.
    click(&app, 7_603, "r_MYSELF").await;
    assert_eq!(attribution_of(&app, 7_603).await.unwrap().0, own);

    // The program off: counted, nobody attributed.
    program(&app, "enabled = false").await;
    click(&app, 7_604, "r_ANN").await;
    assert_eq!(attribution_of(&app, 7_604).await, None);
    assert_eq!(
        outcomes(&clicks_of(&app, 7_604).await),
        [(ann, "program_off")]
    );
    click(&app, 7_603, "r_ANN").await;
    assert_eq!(attribution_of(&app, 7_603).await.unwrap().0, own);
}

#[tokio::test]
async fn last_click_attributes_every_click_and_refreshes_the_same_affiliate() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    stars_channel(&app, -100_960_011, json!({"title": "Signals"})).await;
    program(&app, "enabled = true, attribution = 'last_click'").await;
    let ann = affiliate(&app, "ANN", None).await;
    let bob = affiliate(&app, "BOB", None).await;

    click(&app, 7_611, "r_ANN").await;
    click(&app, 7_611, "r_BOB").await;
    assert_eq!(attribution_of(&app, 7_611).await.unwrap().0, bob);
    age_attribution(&app, 7_611, 3).await;
    let (_, aged) = attribution_of(&app, 7_611).await.unwrap();
    click(&app, 7_611, "r_bob").await;
    let (by, refreshed) = attribution_of(&app, 7_611).await.unwrap();
    assert_eq!(by, bob);
    assert!(refreshed > aged, "{refreshed} after {aged}");
    assert_eq!(
        outcomes(&clicks_of(&app, 7_611).await),
        [
            (ann, "attributed"),
            (bob, "attributed"),
            (bob, "attributed")
        ]
    );
}

#[tokio::test]
async fn an_unknown_or_inactive_code_is_ignored_and_the_catalogue_shown() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    stars_channel(&app, -100_960_021, json!({"title": "Signals"})).await;
    program(&app, "enabled = true").await;
    let gone = affiliate(&app, "GONE", None).await;
    app.db()
        .await
        .execute(
            "UPDATE affiliates SET active = false WHERE id = $1",
            &[&gone],
        )
        .await
        .unwrap();

    for payload in ["r_NOPE", "r_gone", "r_x", "r_BAD-CODE"] {
        click(&app, 7_621, payload).await;
    }
    assert_eq!(count(&app, "referral_clicks", &[]).await, 0);
    assert_eq!(count(&app, "referral_attributions", &[]).await, 0);
}

#[tokio::test]
async fn a_referral_link_with_a_plan_opens_the_plan_and_a_repeat_records_nothing_twice() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_960_031, json!({"title": "Signals"})).await;
    let premium = paid_plan(&app, &[c], "Premium monthly", 300, Some(30)).await;
    program(&app, "enabled = true").await;
    let ann = affiliate(&app, "ANN", None).await;

    let update = text_update(&person(7_631), &format!("/start r_ann-p{premium}"));
    let reply = send(&app, &update).await;
    assert_contains(text(&reply), &["• Premium monthly: 300 ⭐ for 30 days"]);
    assert!(!text(&reply).contains(CATALOGUE), "{reply}");
    assert_eq!(
        buttons(&reply),
        [(
            "Buy: Premium monthly · 300 ⭐".to_string(),
            format!("p:{premium}")
        )]
    );
    // Telegram delivers it again: the same reply, no second click.
    assert_eq!(send(&app, &update).await, reply);
    assert_eq!(
        outcomes(&clicks_of(&app, 7_631).await),
        [(ann, "attributed")]
    );

    // An unknown code with a plan: just the plan.
    let reply = send(
        &app,
        &text_update(&person(7_632), &format!("/start r_NOPE-p{premium}")),
    )
    .await;
    assert_eq!(buttons(&reply)[0].1, format!("p:{premium}"));
    assert_eq!(count(&app, "referral_clicks", &[]).await, 1);
}

/// Clicks of one buyer on different links, released together: one attribution, and the clicks
/// say the same — under first click one `attributed` (the attribution's affiliate) and the rest
/// `kept`; under last click all `attributed`, the last written being the attribution's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clicks_of_one_buyer_raced_end_with_one_attribution_the_clicks_agree_with() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    stars_channel(&app, -100_960_041, json!({"title": "Signals"})).await;
    let codes = ["RACE_A", "RACE_B", "RACE_C", "RACE_D"];
    let mut ids = Vec::new();
    for code in codes {
        ids.push(affiliate(&app, code, None).await);
    }
    for round in 0..ROUNDS {
        let last_click = round % 2 == 1;
        let rule = if last_click {
            "last_click"
        } else {
            "first_click"
        };
        program(&app, &format!("enabled = true, attribution = '{rule}'")).await;
        let user = 7_700 + round;
        let replies = race(codes.len(), |i| {
            let app = app.clone();
            let update = text_update(&person(user), &format!("/start r_{}", codes[i]));
            async move { send(&app, &update).await }
        })
        .await;
        for reply in &replies {
            assert_contains(text(reply), &[CATALOGUE]);
        }
        let clicks = clicks_of(&app, user).await;
        assert_eq!(clicks.len(), codes.len(), "round {round}: {clicks:?}");
        let mut clicked: Vec<i32> = clicks.iter().map(|(a, _)| *a).collect();
        clicked.sort();
        assert_eq!(clicked, ids, "round {round}");
        let (by, _) = attribution_of(&app, user).await.unwrap();
        let attributed: Vec<i32> = clicks
            .iter()
            .filter(|(_, o)| o == "attributed")
            .map(|(a, _)| *a)
            .collect();
        if last_click {
            assert_eq!(attributed.len(), codes.len(), "round {round}: {clicks:?}");
            assert_eq!(attributed.last(), Some(&by), "round {round}: {clicks:?}");
        } else {
            assert_eq!(attributed, [by], "round {round}: {clicks:?}");
            let kept = clicks.iter().filter(|(_, o)| o == "kept").count();
            assert_eq!(kept, codes.len() - 1, "round {round}: {clicks:?}");
        }
        assert_eq!(
            count(
                &app,
                "referral_attributions a JOIN subscribers s ON s.id = a.subscriber_id
                 WHERE s.telegram_user_id = $1",
                &[&user]
            )
            .await,
            1,
            "round {round}"
        );
    }
}

fn ukrainian(id: i64) -> Value {
    json!({"id": id, "is_bot": false, "first_name": "Оля", "username": format!("olha{id}"),
           "language_code": "uk"})
}

/// The link in a `/referral` answer.
fn link_in(reply: &Value) -> String {
    let text = text(reply);
    let at = text
        .find("https://")
        .unwrap_or_else(|| panic!("no link in {text}"));
    text[at..].split_whitespace().next().unwrap().to_string()
}

#[tokio::test]
async fn a_buyer_asks_for_their_own_link_and_gets_the_same_one_each_time() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    program(
        &app,
        "enabled = true, buyer_links = true, buyer_reward_days = 7, first_percent = 10",
    )
    .await;
    let olha = ukrainian(7_641);

    let reply = send(&app, &text_update(&olha, "/referral")).await;
    assert_eq!(reply["method"], "sendMessage", "{reply}");
    assert_contains(
        text(&reply),
        &[
            "Ваше реферальне посилання:",
            "за першу покупку кожного друга за цим посиланням ви отримаєте 7 безкоштовних днів доступу.",
        ],
    );
    let link = link_in(&reply);
    let code = link
        .strip_prefix(&format!("https://t.me/{BOT}?start=r_"))
        .unwrap_or_else(|| panic!("{link}"));
    assert_eq!(code.len(), 8, "{code}");
    assert!(
        code.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()),
        "{code}"
    );
    let again = send(&app, &text_update(&olha, "/referral")).await;
    assert_eq!(link_in(&again), link);
    let row = app
        .db()
        .await
        .query_one(
            "SELECT a.name, a.code, a.active FROM affiliates a
             JOIN subscribers s ON s.id = a.subscriber_id WHERE s.telegram_user_id = $1",
            &[&7_641_i64],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>("name"), "Оля");
    assert_eq!(row.get::<_, String>("code"), code);
    assert_eq!(count(&app, "affiliates", &[]).await, 1);

    // A friend follows it and is attributed to her.
    click_with_catalogue_empty(&app, 7_642, &format!("r_{code}")).await;
    let own: i32 = row_id(&app, code).await;
    assert_eq!(attribution_of(&app, 7_642).await.unwrap().0, own);

    // Without reward days, the first purchase's percent; in English.
    program(&app, "buyer_reward_days = NULL").await;
    let reply = send(&app, &text_update(&person(7_643), "/referral")).await;
    assert_contains(
        text(&reply),
        &[
            "Your referral link:\nhttps://t.me/subgate_test_bot?start=r_",
            "you earn 10 % of its price.",
        ],
    );
}

async fn row_id(app: &TestApp, code: &str) -> i32 {
    app.db()
        .await
        .query_one("SELECT id FROM affiliates WHERE code = $1", &[&code])
        .await
        .unwrap()
        .get("id")
}

/// A click in a bot with nothing on sale: the empty catalogue.
async fn click_with_catalogue_empty(app: &TestApp, user: i64, payload: &str) {
    let reply = send(
        app,
        &text_update(&person(user), &format!("/start {payload}")),
    )
    .await;
    assert_eq!(
        text(&reply),
        "There are no channels or groups for sale right now. Please check back later."
    );
}

#[tokio::test]
async fn a_staff_made_affiliate_of_the_buyer_is_reused_and_an_inactive_one_refused() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    program(
        &app,
        "enabled = true, buyer_links = true, first_percent = 15",
    )
    .await;
    let own = affiliate(&app, "ANN_PARTNER", Some(subscriber(&app, 7_651).await)).await;

    let reply = send(&app, &text_update(&person(7_651), "/referral")).await;
    assert_eq!(
        link_in(&reply),
        format!("https://t.me/{BOT}?start=r_ANN_PARTNER")
    );
    assert_eq!(count(&app, "affiliates", &[]).await, 1);

    app.db()
        .await
        .execute(
            "UPDATE affiliates SET active = false WHERE id = $1",
            &[&own],
        )
        .await
        .unwrap();
    let reply = send(&app, &text_update(&person(7_651), "/referral")).await;
    assert_eq!(
        text(&reply),
        "Sorry, the referral program is not available to you."
    );
}

#[tokio::test]
async fn without_the_program_or_buyer_links_there_is_no_link() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    const NONE: &str = "Sorry, referral links are not available right now.";

    // The program is off by default.
    let reply = send(&app, &text_update(&person(7_661), "/referral")).await;
    assert_eq!(text(&reply), NONE);
    program(&app, "enabled = true").await;
    let reply = send(&app, &text_update(&person(7_661), "/referral")).await;
    assert_eq!(text(&reply), NONE);
    program(&app, "enabled = false, buyer_links = true").await;
    let reply = send(&app, &text_update(&ukrainian(7_662), "/referral")).await;
    assert_eq!(
        text(&reply),
        "На жаль, реферальні посилання зараз недоступні."
    );
    assert_eq!(count(&app, "affiliates", &[]).await, 0);

    // On, but the bot has no username to make a link with.
    let app = TestApp::spawn().await;
    program(&app, "enabled = true, buyer_links = true").await;
    let reply = send(&app, &text_update(&person(7_663), "/referral")).await;
    assert_eq!(text(&reply), NONE);
    assert_eq!(count(&app, "affiliates", &[]).await, 0);
}
