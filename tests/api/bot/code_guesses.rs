//! Guessing promo codes through the bot: an unknown and an inactive code get one answer, wrong
//! codes are limited per buyer and for everyone per minute, and the limits hold when the
//! guesses arrive all at once (tasks released together, several rounds, the counters read
//! back from the database).

use std::sync::Arc;

use serde_json::json;
use subgate::bot::guesses::{PER_MINUTE, PER_USER};

use crate::{
    bot::conversation::{app_with, one_i64, person, send, stars_channel, text_update},
    support::{fake_bot::FakeBot, helpers::TestApp, race::race},
};

const ROUNDS: i64 = 5;
const NO_SUCH: &str = "cannot be used: there is no such code.";
const TOO_MANY: &str = "Too many wrong codes. Please try again in ";

async fn code(app: &TestApp, code: &str, active: bool) {
    app.db()
        .await
        .execute(
            "INSERT INTO promo_codes (code, percent_off, active) VALUES ($1, 25, $2)",
            &[&code, &active],
        )
        .await
        .unwrap();
}

/// Sends `/code <text>` for each `(user, text)` at once; the replies' texts, in order.
async fn at_once(app: &Arc<TestApp>, guesses: Vec<(i64, String)>) -> Vec<String> {
    race(guesses.len(), |i| {
        let app = app.clone();
        let (user, text) = &guesses[i];
        let update = text_update(&person(*user), &format!("/code {text}"));
        async move {
            send(&app, &update).await["text"]
                .as_str()
                .unwrap()
                .to_string()
        }
    })
    .await
}

async fn wrong_counted(app: &TestApp, who: i64) -> i64 {
    one_i64(
        app,
        "SELECT wrong::bigint FROM bot_code_guesses WHERE who = $1",
        &[&who],
    )
    .await
}

/// Moves every counting window `secs` into the past.
async fn age_windows(app: &TestApp, secs: f64) {
    app.db()
        .await
        .execute(
            "UPDATE bot_code_guesses SET window_start = window_start - make_interval(secs => $1)",
            &[&secs],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn an_inactive_code_reads_as_an_unknown_one() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    stars_channel(&app, -100_910_001, json!({})).await;
    code(&app, "OFF10", false).await;
    let buyer = person(7950);
    for text in ["off10", "nope10"] {
        let reply = send(&app, &text_update(&buyer, &format!("/code {text}"))).await;
        assert_eq!(
            reply["text"],
            format!("Sorry, the code {} {NO_SUCH}", text.to_uppercase()),
        );
    }
    // Both count as wrong guesses.
    assert_eq!(wrong_counted(&app, 7950).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buyers_wrong_codes_are_limited_even_all_at_once() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    stars_channel(&app, -100_910_002, json!({})).await;
    code(&app, "REAL25", true).await;
    let n = 12usize;
    for round in 0..ROUNDS {
        let user = 7_960 + round;
        let replies = at_once(
            &app,
            (0..n)
                .map(|i| (user, format!("GUESS{round}X{i}")))
                .collect(),
        )
        .await;
        let wrong = replies.iter().filter(|r| r.ends_with(NO_SUCH)).count();
        let limited = replies.iter().filter(|r| r.starts_with(TOO_MANY)).count();
        assert_eq!(
            (wrong, limited),
            (PER_USER as usize, n - PER_USER as usize),
            "round {round}: {replies:?}"
        );
        assert_eq!(wrong_counted(&app, user).await, i64::from(PER_USER));
        // Even the right code is not looked at now: the answer tells nothing.
        let reply = send(&app, &text_update(&person(user), "/code REAL25")).await;
        assert_eq!(
            reply["text"], "Too many wrong codes. Please try again in 15 minutes.",
            "round {round}"
        );
    }
    // Every round's wrong guesses were counted for everyone too, and nothing more.
    assert_eq!(wrong_counted(&app, 0).await, ROUNDS * i64::from(PER_USER));
    // Once the window has passed, the buyer may try again.
    age_windows(&app, 901.0).await;
    let reply = send(&app, &text_update(&person(7_960), "/code REAL25")).await;
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .starts_with("Code REAL25 applied"),
        "{reply}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn everyones_wrong_codes_are_limited_per_minute_even_all_at_once() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    stars_channel(&app, -100_910_003, json!({})).await;
    let n = PER_MINUTE as usize + 10;
    for round in 0..3i64 {
        let replies = at_once(
            &app,
            (0..n)
                .map(|i| (8_000 + round * 100 + i as i64, format!("G{round}X{i}")))
                .collect(),
        )
        .await;
        let wrong = replies.iter().filter(|r| r.ends_with(NO_SUCH)).count();
        let limited = replies.iter().filter(|r| r.starts_with(TOO_MANY)).count();
        assert_eq!(
            (wrong, limited),
            (PER_MINUTE as usize, 10),
            "round {round}: {replies:?}"
        );
        assert_eq!(wrong_counted(&app, 0).await, i64::from(PER_MINUTE));
        assert!(
            replies
                .iter()
                .filter(|r| r.starts_with(TOO_MANY))
                .all(|r| r.ends_with("in 1 minute.")),
            "{replies:?}"
        );
        // The next minute starts afresh.
        age_windows(&app, 61.0).await;
    }
}
