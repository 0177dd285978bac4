//! Who may call the Mini App's API: `initData` signed with this bot's token, not older than
//! `MINI_APP_MAX_AGE_SECS`; anything else is a 401 problem, no bot token a 503, and a buyer
//! calling too often a 429 with `Retry-After`.

use axum::http::Method;
use chrono::Utc;

use super::{call, call_as, init_data, init_data_with};
use crate::{
    bot::conversation::app_with,
    support::{
        fake_bot::{FakeBot, TOKEN},
        helpers::TestApp,
    },
};

#[track_caller]
fn assert_problem(r: &crate::support::helpers::TestResponse, status: u16) {
    let body = r.expect(status);
    assert_eq!(
        r.header("content-type"),
        Some("application/problem+json"),
        "{body}"
    );
    assert_eq!(body["status"], status, "{body}");
    assert!(body["type"].is_string() && body["title"].is_string() && body["detail"].is_string());
}

#[tokio::test]
async fn mini_app_calls_without_valid_init_data_are_401() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let me = "/app/api/me";
    // No header, another scheme, garbage.
    let none = app.request(Method::GET, me, &[], "").await;
    assert_problem(&none, 401);
    let bearer = app
        .request(
            Method::GET,
            me,
            &[("authorization", &format!("Bearer {}", init_data(1, "en")))],
            "",
        )
        .await;
    assert_problem(&bearer, 401);
    assert_problem(&call_as(&app, "garbage", Method::GET, me, None).await, 401);
    // A forged hash: the user changed after signing.
    let forged = init_data(8101, "en").replace("8101", "8102");
    assert_problem(&call_as(&app, &forged, Method::GET, me, None).await, 401);
    // Signed with another bot's token.
    let other = init_data_with(
        "654321:ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvu",
        8101,
        "en",
        Utc::now().timestamp(),
    );
    assert_problem(&call_as(&app, &other, Method::GET, me, None).await, 401);
    // Older than MINI_APP_MAX_AGE_SECS (a day by default), or from the future.
    let old = init_data_with(TOKEN, 8101, "en", Utc::now().timestamp() - 86_400 - 5);
    assert_problem(&call_as(&app, &old, Method::GET, me, None).await, 401);
    let ahead = init_data_with(TOKEN, 8101, "en", Utc::now().timestamp() + 600);
    assert_problem(&call_as(&app, &ahead, Method::GET, me, None).await, 401);
    // Nobody was made a subscriber by any of these.
    assert_eq!(app.count("subscribers").await, 0);
    // The genuine article passes, and its user becomes a subscriber.
    call(&app, 8101, Method::GET, me, None).await.expect(200);
    assert_eq!(app.count("subscribers").await, 1);
}

#[tokio::test]
async fn mini_app_without_a_bot_token_is_503() {
    let app = TestApp::spawn().await;
    let r = call(&app, 8111, Method::GET, "/app/api/me", None).await;
    assert_problem(&r, 503);
}

#[tokio::test]
async fn mini_app_buyer_over_the_limit_gets_429_with_retry_after() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let path = "/app/api/offer?channel_id=999999";
    for _ in 0..30 {
        call(&app, 8121, Method::GET, path, None).await.expect(404);
    }
    let r = call(&app, 8121, Method::GET, path, None).await;
    assert_problem(&r, 429);
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=10).contains(&retry), "{retry}");
    // Another buyer is not held back.
    call(&app, 8122, Method::GET, path, None).await.expect(404);
}
